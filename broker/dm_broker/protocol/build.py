"""Version-tolerant construction of kio entities.

Handlers are written once for all versions of an API; fields a version lacks are dropped here,
and nested entity classes are looked up in the module of the version being answered.
"""

from __future__ import annotations

import datetime
import sys
from dataclasses import fields
from functools import cache
from typing import Any

ZERO = datetime.timedelta(0)


@cache
def field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def make(cls: type, **values: Any) -> Any:
    names = field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


@cache
def nested(cls: type, name: str) -> type:
    """The nested entity class `name` of the same API version as `cls`."""
    return getattr(sys.modules[cls.__module__], name)


@cache
def nested_optional(cls: type, name: str) -> type | None:
    """Like nested(), for entities that only some versions have."""
    return getattr(sys.modules[cls.__module__], name, None)


def has(cls: type, name: str) -> bool:
    return name in field_names(cls)


def ms_to_datetime(ms: int) -> datetime.datetime | None:
    if ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
