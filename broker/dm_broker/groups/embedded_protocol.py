"""The consumer protocol embedded in classic JoinGroup/SyncGroup (ConsumerProtocolSubscription and
ConsumerProtocolAssignment, versions 0-3), read and written by the coordinator when classic members
live in a KIP-848 group (online upgrade and downgrade, ADR 0037)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..binary import FormatError, Reader, Writer

MAX_VERSION = 3


@dataclass(frozen=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned: dict[str, frozenset[int]] = field(default_factory=dict)


def decode_subscription(metadata: bytes) -> Subscription:
    """Raises FormatError for metadata that is not a consumer protocol subscription."""
    try:
        r = Reader(metadata)
        version = r.i16()
        topics = tuple(t for t in (r.string() for _ in range(max(0, r.i32()))) if t)
        r.bytes_()  # user data: the client-side assignor's, not the broker's business
        owned: dict[str, frozenset[int]] = {}
        if version >= 1 and r.remaining:
            for _ in range(max(0, r.i32())):
                topic = r.string() or ""
                owned[topic] = frozenset(r.i32() for _ in range(max(0, r.i32())))
        return Subscription(version, topics, {t: ps for t, ps in owned.items() if ps})
    except (FormatError, UnicodeDecodeError) as exc:
        raise FormatError(f"not a consumer protocol subscription: {exc}") from None


def encode_assignment(version: int, assignment: dict[str, frozenset[int]]) -> bytes:
    w = Writer().i16(min(max(version, 0), MAX_VERSION)).i32(len(assignment))
    for topic in sorted(assignment):
        parts = sorted(assignment[topic])
        w.string(topic).i32(len(parts))
        for p in parts:
            w.i32(p)
    return w.bytes_(None).done()


def decode_assignment(data: bytes) -> dict[str, frozenset[int]]:
    if not data:
        return {}
    try:
        r = Reader(data)
        r.i16()
        out: dict[str, frozenset[int]] = {}
        for _ in range(max(0, r.i32())):
            topic = r.string() or ""
            out[topic] = frozenset(r.i32() for _ in range(max(0, r.i32())))
        return out
    except (FormatError, UnicodeDecodeError):
        return {}
