"""Errors that carry a Kafka error code to the client."""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class KafkaError(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message
