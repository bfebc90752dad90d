"""Requests of every API the broker serves with many elements in one array: what a client may send to make one
request as costly as it can (issue 65). Built from kio's schemas, so every API and version is covered without a
hand-written request per API; names are distinct, numbers small and valid-looking."""

from __future__ import annotations

import dataclasses
import datetime
import functools
import itertools
import typing
import uuid
from typing import Any

from dm_broker.protocol.client import encode_request
from dm_broker.protocol.codec import request_class

_counter = itertools.count()

PRIMITIVES: dict[str, Any] = {
    "int8": 0, "int16": 0, "uint16": 0, "int32": 0, "uint32": 0, "int64": 0, "uint64": 0, "float64": 0.0,
    "bool": False, "uuid": uuid.UUID(int=0), "bytes": b"", "records": None,
    "timedelta_i32": datetime.timedelta(0), "timedelta_i64": datetime.timedelta(0),
    "datetime_i64": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
}


@functools.cache
def _shape(hint: Any, kafka_type: str | None) -> tuple[str, Any]:
    """What a field of this type hint holds: ("array", item hint), ("entity", class), ("string", None) or
    ("plain", its value); worked out once per hint (typing's introspection is slow)."""
    args = typing.get_args(hint)
    tuple_hint = next((a for a in (hint, *args) if typing.get_origin(a) is tuple), None)
    if tuple_hint is not None:
        return "array", typing.get_args(tuple_hint)[0]
    entity = next((a for a in (hint, *args) if dataclasses.is_dataclass(a)), None)
    if entity is not None:
        return "entity", entity
    if kafka_type == "string":
        return "string", None
    if kafka_type in PRIMITIVES:
        value = PRIMITIVES[kafka_type]
        plain = isinstance(value, datetime.timedelta | datetime.datetime | uuid.UUID | bytes | type(None))
        return "plain", value if plain or not callable(hint) else hint(value)
    raise TypeError(f"no value for kafka type {kafka_type!r}")


def _value(hint: Any, kafka_type: str | None, fan: int, depth: int, at: int) -> Any:
    """A value for one field: arrays nested `at` deep get `fan` items, the others one."""
    kind, what = _shape(hint, kafka_type)
    if kind == "array":
        n = fan if depth == at else 1
        return tuple(_value(what, kafka_type, fan, depth + 1, at) for _ in range(n))
    if kind == "entity":
        return build(what, fan, depth, at)
    if kind == "string":
        return f"f{next(_counter) % 100_000_000:x}"
    return what


@functools.cache
def _fields(cls: type) -> tuple[tuple[str, Any, str | None], ...]:
    """The fields a request needs, with their type hints (resolving them is slow: once per class)."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name], f.metadata.get("kafka_type")) for f in dataclasses.fields(cls)
                 if not ("tag" in f.metadata and f.default is not dataclasses.MISSING))


def build(cls: type, fan: int, depth: int = 0, at: int = 0) -> Any:
    return cls(**{name: _value(hint, kafka_type, fan, depth, at) for name, hint, kafka_type in _fields(cls)})


@functools.lru_cache(maxsize=256)
def flood(api_key: int, version: int, fan: int, at: int = 0, correlation_id: int = 7) -> bytes:
    """A whole request frame of the API whose arrays nested `at` deep (0: the outermost) carry `fan` items each
    (kept: a test asks for the same frames as several users)."""
    return encode_request(api_key, version, correlation_id, build(request_class(api_key, version), fan, 0, at))
