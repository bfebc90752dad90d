"""Structural bounds check of a request body, run before kio parses it.

kio's native reader reserves memory for an array from its declared length before reading the
elements, so a forged length (say 2^31) makes the allocator abort the whole process. This walk
follows the same schema without building anything and refuses any array, string or byte field
that claims more elements or bytes than the frame has left, and any null array the schema does not
allow. It is the one pass over the body before kio parses it.

It also counts the request's elements (the items of every array, nested ones included, and tagged
fields): what a handler does and what its answer carries grows with them, not with the bytes (a 1 MiB
frame holds 262,144 partition indexes, each echoed with an error). A request with more than the limit
(socket.request.max.elements) is refused as soon as an array's length takes the count past it, before
anything is walked or built. Arrays of fixed-size items are stepped over in one move.
"""

from __future__ import annotations

import dataclasses
import struct
import typing
from functools import cache

FIXED = {"int8": 1, "bool": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "timedelta_i32": 4,
         "int64": 8, "uint64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8, "uuid": 16,
         "error_code": 2}
VARLEN = {"string", "bytes", "records"}


class BoundsError(ValueError):
    pass


class TooManyElements(BoundsError):
    def __init__(self, count: int, limit: int) -> None:
        super().__init__(f"{count} or more array elements, over the limit of {limit} (socket.request.max.elements)")
        self.count = count
        self.limit = limit


NO_LIMIT = 1 << 62


# A step is (kind, payload): ("fixed", size), ("varlen", kafka type), ("entity", steps), ("nullable_entity", steps),
# ("array", (item step, nullable)), ("tags", None).
Step = tuple[str, typing.Any]


@cache
def plan(cls: type) -> tuple[Step, ...]:
    hints = typing.get_type_hints(cls)
    steps: list[Step] = []
    for f in dataclasses.fields(cls):
        if "tag" in f.metadata:
            continue  # tagged fields are skipped by size in the tags section
        step = _field_step(hints[f.name], f.metadata.get("kafka_type"))
        if step[0] == "fixed" and steps and steps[-1][0] == "fixed":
            steps[-1] = ("fixed", steps[-1][1] + step[1])  # neighbouring fixed fields: one step
        else:
            steps.append(step)
    if cls.__flexible__:
        steps.append(("tags", None))
    return tuple(steps)


def _fixed_size(steps: tuple[Step, ...]) -> int | None:
    """The size of an entity made only of fixed-size fields (no tags), else None."""
    return steps[0][1] if len(steps) == 1 and steps[0][0] == "fixed" else None


def _field_step(hint: typing.Any, kafka_type: str | None) -> Step:
    args = typing.get_args(hint)
    candidates = (hint, *args)
    tuple_hint = next((a for a in candidates if typing.get_origin(a) is tuple), None)
    if tuple_hint is not None:
        item = typing.get_args(tuple_hint)[0]
        if dataclasses.is_dataclass(item):
            size = _fixed_size(plan(item))
            item_step = ("fixed", size) if size is not None else ("entity", plan(item))
        else:
            item_step = _primitive(kafka_type)
        return ("array", (item_step, type(None) in args))
    entity = next((a for a in candidates if dataclasses.is_dataclass(a)), None)
    if entity is not None:
        # a nullable struct (ConsumerGroupHeartbeat's assignment) starts with an int8: -1 null, 1 present
        return ("nullable_entity" if type(None) in args else "entity", plan(entity))
    return _primitive(kafka_type)


def _primitive(kafka_type: str | None) -> Step:
    if kafka_type in FIXED:
        return ("fixed", FIXED[kafka_type])
    if kafka_type in VARLEN:
        return ("varlen", kafka_type)
    raise TypeError(f"bounds check does not know kafka type {kafka_type!r}")


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise BoundsError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 35:
            raise BoundsError("varint too long")


def check(cls: type, buf: bytes | memoryview, pos: int, max_elements: int = NO_LIMIT) -> int:
    """Raises BoundsError unless every length in the body fits in the frame, TooManyElements when the
    body has more than `max_elements` array elements; returns how many it has."""
    walk = _Walk(buf, cls.__flexible__, max_elements)
    walk.steps(plan(cls), pos)
    return walk.elements


class _Walk:
    __slots__ = ("buf", "elements", "end", "flexible", "limit")

    def __init__(self, buf: bytes | memoryview, flexible: bool, limit: int) -> None:
        self.buf = buf
        self.end = len(buf)
        self.flexible = flexible
        self.limit = limit
        self.elements = 0

    def count(self, n: int) -> None:
        self.elements += n
        if self.elements > self.limit:
            raise TooManyElements(self.elements, self.limit)

    def steps(self, steps: tuple[Step, ...], pos: int) -> int:
        buf, end, flexible = self.buf, self.end, self.flexible
        for kind, payload in steps:
            if kind == "fixed":
                pos += payload
            elif kind == "varlen":
                pos = _varlen(buf, pos, flexible, payload)
            elif kind == "entity":
                pos = self.steps(payload, pos)
            elif kind == "nullable_entity":
                if pos >= end:
                    raise BoundsError("truncated struct marker")
                present = buf[pos] < 0x80  # the int8 marker, -1 (0xff) for null
                pos = self.steps(payload, pos + 1) if present else pos + 1
            elif kind == "array":
                (item_kind, item), nullable = payload
                n, pos = _length(buf, pos, flexible, I32)
                if n < 0 and not nullable:
                    # kio reads -1 as None even where the schema forbids null; Kafka rejects that
                    raise BoundsError("null array in a non-nullable field")
                if n > end - pos:
                    raise BoundsError(f"array claims {n} elements with {end - pos} bytes left")
                if n > 0:
                    self.count(n)
                    if item_kind == "fixed":
                        pos += n * item
                    elif item_kind == "entity":
                        for _ in range(n):
                            pos = self.steps(item, pos)
                    else:
                        for _ in range(n):
                            pos = _varlen(buf, pos, flexible, item)
            else:  # tags
                count, pos = read_uvarint(buf, pos)
                if count > end - pos:
                    raise BoundsError("tagged field count exceeds the frame")
                if count:
                    self.count(count)
                for _ in range(count):
                    _, pos = read_uvarint(buf, pos)
                    size, pos = read_uvarint(buf, pos)
                    pos += size
            if pos > end:
                raise BoundsError("field runs past the end of the frame")
        return pos


I16 = struct.Struct(">h")
I32 = struct.Struct(">i")


def _length(buf: bytes, pos: int, flexible: bool, legacy: struct.Struct) -> tuple[int, int]:
    """A length prefix: compact (uvarint of n+1) in flexible versions, else int16/int32."""
    if flexible:
        n, pos = read_uvarint(buf, pos)
        return n - 1, pos
    if pos + legacy.size > len(buf):
        raise BoundsError("truncated length")
    return legacy.unpack_from(buf, pos)[0], pos + legacy.size


def _varlen(buf: bytes, pos: int, flexible: bool, kafka_type: str) -> int:
    n, pos = _length(buf, pos, flexible, I16 if kafka_type == "string" else I32)
    if n > len(buf) - pos:
        raise BoundsError(f"{kafka_type} of {n} bytes with {len(buf) - pos} left")
    return pos + max(n, 0)
