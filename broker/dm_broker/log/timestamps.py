"""Producer timestamps a CreateTime topic accepts (KIP-937: message.timestamp.before.max.ms and
after.max.ms, and the older difference.max.ms): a batch with a record outside the window is refused
with INVALID_TIMESTAMP, naming each such record (KIP-467), as Kafka's LogValidator does. LogAppendTime
topics stamp the broker's time instead, so nothing is checked there."""

from __future__ import annotations

from ..config import LONG_MAX
from .records import decode_records


def window(settings) -> tuple[int, int, int] | None:
    """(before, after, difference) in ms, or None when every timestamp is accepted."""
    if settings["message.timestamp.type"] != "CreateTime":
        return None
    limits = (settings["message.timestamp.before.max.ms"], settings["message.timestamp.after.max.ms"],
              settings["message.timestamp.difference.max.ms"])
    return None if all(limit >= LONG_MAX for limit in limits) else limits


def refused_records(batch: bytes | memoryview, limits: tuple[int, int, int], now_ms: int) -> list[tuple[int, str]]:
    """(index in the batch, why) for every record whose timestamp is outside the window."""
    before, after, difference = limits
    earliest = max(now_ms - before, now_ms - difference)
    latest = min(now_ms + after, now_ms + difference)
    # Every record is read: the header's timestamps bound them only for well-behaved producers (a
    # record's delta may be negative), and this runs only on topics that set a window.
    out = []
    for i, record in enumerate(decode_records(bytes(batch))):
        if not earliest <= record.timestamp <= latest:
            out.append((i, f"Timestamp {record.timestamp} of message with offset {record.offset} is out of range. "
                           f"The timestamp should be within [{earliest}, {latest}]"))
    return out
