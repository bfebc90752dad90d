"""Errors that carry a Kafka error code to the client."""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class KafkaError(Exception):
    """`record_errors`: (index in the batch, message) of the records that made it fail (KIP-467)."""

    def __init__(self, code: ErrorCode, message: str | None = None,
                 record_errors: list[tuple[int, str]] | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message
        self.record_errors = record_errors or []
