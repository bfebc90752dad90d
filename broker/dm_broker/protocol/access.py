"""What each API asks the authorizer, declared beside the API table (ADR 0024).

An API's `Access` lists every (resource type, operation) Kafka's KafkaApis checks for it and how the
request names the resource, so the dispatcher can enforce it and docs/security.md can print it:

- `public`: answered before authentication on a SASL listener (ApiVersions, SaslHandshake,
  SaslAuthenticate); no ACL is asked.
- `requires`: one permission on the cluster the whole request needs. The dispatcher asks it before
  the handler runs and answers with `refusal` (every result of the request refused with the
  authorization error) when it is missing; the handler never sees a refused request.
- `checks`: permissions asked per item of the request (a topic, a group, a transactional id); the
  handler asks them through `RequestContext.denied`/`allowed`, which refuse any question not
  declared here (an undeclared check is a bug that fails closed, never a silent pass).
- `filtered`: what the principal may not describe is left out of the answer instead of refused.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from ..security.acls import Operation, ResourceType


@dataclass(frozen=True, slots=True)
class Check:
    resource_type: ResourceType
    operation: Operation
    named_by: str = ""  # how the request names the resource (docs)

    def __str__(self) -> str:
        return f"{self.operation.name} on {self.resource_type.name}" + (f" ({self.named_by})" if self.named_by else "")


# The request, the response class, the error and its message -> the answer to a refused request.
Refusal = Callable[[Any, type, ErrorCode, str], Any]


@dataclass(frozen=True, slots=True)
class Access:
    checks: tuple[Check, ...] = ()
    public: bool = False
    requires: Check | None = None
    refusal: Refusal | None = None
    filtered: bool = False
    note: str = ""
    _declared: frozenset[tuple[ResourceType, Operation]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.public and (self.checks or self.requires):
            raise ValueError("a public API asks no ACL")
        if self.requires is not None and self.requires.resource_type != ResourceType.CLUSTER:
            raise ValueError("only a cluster permission is required of a whole request")
        if not self.public and not self.checks and self.requires is None:
            raise ValueError("an API that is not public declares what it checks")
        every = (*self.checks, *((self.requires,) if self.requires is not None else ()))
        object.__setattr__(self, "_declared", frozenset((c.resource_type, c.operation) for c in every))

    def declares(self, resource_type: ResourceType, operation: Operation) -> bool:
        return (resource_type, operation) in self._declared


PUBLIC = Access(public=True)


def cluster(operation: Operation, refusal: Refusal | None = None, *checks: Check, note: str = "") -> Access:
    """The whole request needs `operation` on the cluster."""
    return Access(requires=Check(ResourceType.CLUSTER, operation, "the cluster"), refusal=refusal or top_level_refusal,
                  checks=checks, note=note)


def per_item(*checks: Check, filtered: bool = False, note: str = "") -> Access:
    return Access(checks=checks, filtered=filtered, note=note)


def topic(operation: Operation, named_by: str = "each topic") -> Check:
    return Check(ResourceType.TOPIC, operation, named_by)


def group(operation: Operation, named_by: str = "group_id") -> Check:
    return Check(ResourceType.GROUP, operation, named_by)


def transactional_id(operation: Operation, named_by: str = "transactional_id") -> Check:
    return Check(ResourceType.TRANSACTIONAL_ID, operation, named_by)


def on_cluster(operation: Operation) -> Check:
    return Check(ResourceType.CLUSTER, operation, "the cluster")


class UndeclaredCheck(RuntimeError):
    """A handler asked the authorizer something its API's Access does not declare."""


# -- refusals built from the response schema ---------------------------------------------------------

UNKNOWN_TIME = datetime.datetime.fromtimestamp(-0.001, tz=datetime.UTC)  # Kafka's -1 in a timestamp field
_EMPTY_BY_KAFKA_TYPE: dict[str, Any] = {
    "bool": False, "bytes": b"", "int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "uint32": 0,
    "float64": 0.0, "string": "", "uuid": uuid.UUID(int=0), "error_code": ErrorCode.none,
    "timedelta_i32": datetime.timedelta(0), "timedelta_i64": datetime.timedelta(0), "records": None,
}


def empty(cls: type, **values: Any) -> Any:
    """An instance of a kio entity with `values` and every other field empty (0, "", (), None for
    nullable fields)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in values:
            out[f.name] = values[f.name]
            continue
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
            continue
        type_text, kafka_type = str(f.type), f.metadata.get("kafka_type", "")
        if type_text.startswith("tuple["):
            out[f.name] = ()
        elif "None" in type_text:
            out[f.name] = None
        elif kafka_type.startswith("datetime"):
            out[f.name] = UNKNOWN_TIME
        elif isinstance(f.type, type) and dataclasses.is_dataclass(f.type):
            out[f.name] = empty(f.type)
        else:
            out[f.name] = _EMPTY_BY_KAFKA_TYPE.get(kafka_type, 0)
    return cls(**out)


def top_level_refusal(req: Any, cls: type, error: ErrorCode, message: str) -> Any:
    """The refusal of APIs whose response carries one error for the whole request."""
    names = {f.name for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    if "error_code" in names:  # versions without one answer nothing (Kafka's empty DescribeLogDirs v1-2)
        values["error_code"] = error
    if "error_message" in names:
        values["error_message"] = message
    return empty(cls, **values)


AUTHORIZATION_ERRORS = {
    ResourceType.TOPIC: ErrorCode.topic_authorization_failed,
    ResourceType.GROUP: ErrorCode.group_authorization_failed,
    ResourceType.CLUSTER: ErrorCode.cluster_authorization_failed,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.transactional_id_authorization_failed,
}
