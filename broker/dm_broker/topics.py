"""Topic names: what is valid, and which topics are internal to dm."""

from __future__ import annotations

import re

TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class InvalidTopicError(ValueError):
    pass


def validate_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise InvalidTopicError(f"invalid topic name {name!r}")
    if not TOPIC_NAME.match(name):
        raise InvalidTopicError(
            f"invalid topic name {name!r}: up to 249 characters of ASCII letters, digits, '.', '_', '-'"
        )
