"""Producer timestamps a CreateTime topic accepts (KIP-937: message.timestamp.before.max.ms and
after.max.ms, and the older difference.max.ms): a batch with a record outside the window is refused
with INVALID_TIMESTAMP, naming each such record (KIP-467), as Kafka's LogValidator does. LogAppendTime
topics stamp the broker's time instead, so nothing is checked there."""

from __future__ import annotations

from collections.abc import Sequence

from ..config import LONG_MAX


def window(settings) -> tuple[int, int, int] | None:
    """(before, after, difference) in ms, or None when every timestamp is accepted."""
    if settings["message.timestamp.type"] != "CreateTime":
        return None
    limits = (settings["message.timestamp.before.max.ms"], settings["message.timestamp.after.max.ms"],
              settings["message.timestamp.difference.max.ms"])
    return None if all(limit >= LONG_MAX for limit in limits) else limits


def refused_records(timestamps: Sequence[int], base_offset: int, limits: tuple[int, int, int],
                    now_ms: int) -> list[tuple[int, str]]:
    """(index in the batch, why) for every record whose timestamp is outside the window. `timestamps` are
    every record's (the produce check reads them all: the header's bound them only for well-behaved
    producers, since a record's delta may be negative)."""
    before, after, difference = limits
    earliest = max(now_ms - before, now_ms - difference)
    latest = min(now_ms + after, now_ms + difference)
    return [(i, f"Timestamp {timestamp} of message with offset {base_offset + i} is out of range. "
                f"The timestamp should be within [{earliest}, {latest}]")
            for i, timestamp in enumerate(timestamps) if not earliest <= timestamp <= latest]
