"""The JSON bodies the REST Proxy v2 accepts, as pydantic models: what a request may say is written down
once, and anything else is refused with 422 and pydantic's account of what is wrong."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from .errors import INVALID_REQUEST, RestError


class Body(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)  # v2 clients send fields dm ignores


class Header(Body):
    key: StrictStr
    value: StrictStr | None = None  # base64


class ProducedRecord(Body):
    key: Any = None
    value: Any = None
    partition: StrictInt | None = Field(None, ge=0)
    headers: list[Header] = Field(default_factory=list)  # dm's extension
    timestamp: StrictInt | None = Field(None, ge=0)  # dm's extension: create time, ms since the epoch


class ProduceBody(Body):
    records: list[ProducedRecord] = Field(min_length=1)


class PartitionRef(Body):
    topic: StrictStr
    partition: StrictInt = Field(ge=0)


class PartitionsBody(Body):
    partitions: list[PartitionRef]


class OffsetRef(PartitionRef):
    offset: StrictInt = Field(ge=0)
    metadata: str = ""


class OffsetsBody(Body):
    offsets: list[OffsetRef] = Field(default_factory=list)


class SubscriptionBody(Body):
    topics: list[StrictStr] | None = Field(None, min_length=1)
    topic_pattern: StrictStr | None = None


class ConsumerConfigBody(Body):
    name: StrictStr | None = None
    id: StrictStr | None = None  # v1's spelling of name
    format: StrictStr = "binary"
    auto_offset_reset: StrictStr = Field("latest", alias="auto.offset.reset")
    auto_commit_enable: StrictStr | bool = Field("true", alias="auto.commit.enable")
    fetch_min_bytes: StrictInt | StrictStr | None = Field(None, alias="fetch.min.bytes")
    request_timeout_ms: StrictInt | StrictStr | None = Field(None, alias="consumer.request.timeout.ms")


M = TypeVar("M", bound="Body")


def parse(model: type[M], body: dict[str, Any], code: int = INVALID_REQUEST) -> M:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors())
        raise RestError(422, code, problems[:1000]) from None
