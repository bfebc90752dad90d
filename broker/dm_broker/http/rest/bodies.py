"""The JSON bodies the REST Proxy v2 accepts, as pydantic models: what a request may say is written down
once, and anything else is refused with 422 and pydantic's account of what is wrong."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, field_validator

from .errors import INVALID_REQUEST, RestError
from .formats import SCHEMA_FORMATS


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


INSTANCE_NAME = r"^[A-Za-z0-9._-]{1,249}$"


class ConsumerConfigBody(Body):
    """A consumer instance's settings, as POST /consumers/{group} gives them (Confluent's names)."""

    name: StrictStr | None = Field(None, pattern=INSTANCE_NAME)
    id: StrictStr | None = Field(None, pattern=INSTANCE_NAME)  # v1's spelling of name
    format: Literal["binary", "json"] = "binary"
    auto_offset_reset: Literal["earliest", "latest", "none"] = Field("latest", alias="auto.offset.reset")
    auto_commit_enable: bool = Field(True, alias="auto.commit.enable")  # also "true" / "false"
    fetch_min_bytes: int | None = Field(None, ge=1, alias="fetch.min.bytes")
    request_timeout_ms: int | None = Field(None, ge=0, alias="consumer.request.timeout.ms")

    @field_validator("format", mode="before")
    @classmethod
    def _known_format(cls, value: Any) -> Any:
        if isinstance(value, str) and value.lower() in SCHEMA_FORMATS:
            raise ValueError(f"the {value} format needs a schema registry, which dm does not have (use binary or json)")
        return value.lower() if isinstance(value, str) else value

    @field_validator("auto_offset_reset", mode="before")
    @classmethod
    def _kafka_spellings(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        return {"smallest": "earliest", "largest": "latest"}.get(value.lower(), value.lower())


M = TypeVar("M", bound="Body")


def parse(model: type[M], body: dict[str, Any], code: int = INVALID_REQUEST) -> M:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors())
        raise RestError(422, code, problems[:1000]) from None
