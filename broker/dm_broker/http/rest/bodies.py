"""The JSON bodies the REST Proxy v2 accepts, as pydantic models: what a request may say is written down
once, and anything else is refused with 422 and pydantic's account of what is wrong."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any, Literal, Protocol, TypeVar

import msgspec
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)

from ...topics import TOPIC_NAME
from . import jsonio
from .errors import INVALID_REQUEST, RestError
from .formats import SCHEMA_FORMATS

INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1


class Body(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)  # v2 clients send fields dm ignores


class Base64Body(Body):
    # bytes arrive as base64 strings, decoded while the JSON is parsed (standard or URL-safe alphabet, padding
    # optional): one pass in pydantic-core instead of a base64 call per key and value
    model_config = ConfigDict(val_json_bytes="base64")


class Header(Base64Body):
    key: StrictStr
    value: bytes | None = None


def _embedded_json(value: Any) -> bytes | None:
    return None if value is None else jsonio.dumps(value)


class BinaryRecord(Base64Body):
    """A record of a binary produce body: key and value in base64."""

    key: bytes | None = None
    value: bytes | None = None
    partition: StrictInt | None = Field(None, ge=0, le=INT32_MAX)
    headers: tuple[Header, ...] = ()  # dm's extension: values in base64, whatever the format
    # dm's extension: create time, ms since the epoch (a Kafka timestamp is 64 bits: a larger one is a 422, not a 500)
    timestamp: StrictInt | None = Field(None, ge=0, le=INT64_MAX)


class JsonRecord(BinaryRecord):
    """A record of a json produce body: key and value are any JSON, stored as their JSON text."""

    key: Annotated[Any, AfterValidator(_embedded_json)] = None
    value: Annotated[Any, AfterValidator(_embedded_json)] = None


class BinaryProduceBody(Body):
    records: list[BinaryRecord] = Field(min_length=1)


class JsonProduceBody(Body):
    records: list[JsonRecord] = Field(min_length=1)


PRODUCE_BODIES: dict[str, type[BinaryProduceBody] | type[JsonProduceBody]] = {
    "binary": BinaryProduceBody, "json": JsonProduceBody}


class ProduceHeader(Protocol):
    key: str
    value: bytes | None


class ProduceRecord(Protocol):
    """A record of a produce body, whichever parser read it."""

    key: bytes | None
    value: bytes | None
    partition: int | None
    headers: Sequence[ProduceHeader]
    timestamp: int | None


# The binary body read by msgspec, which decodes the base64 while it parses in about two thirds of
# pydantic-core's time (170 against 231 µs for a hundred 1 KiB records, in process). It accepts a subset of what the
# pydantic models accept (standard base64 with its padding, integers in 64 bits) and reads it to the same
# values; anything it refuses goes to the models, whose verdict and messages stand.
NonNegative = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]
PartitionIndex = Annotated[int, msgspec.Meta(ge=0, le=INT32_MAX)]


class _FastHeader(msgspec.Struct):
    key: str
    value: bytes | None = None


class _FastRecord(msgspec.Struct):
    key: bytes | None = None
    value: bytes | None = None
    partition: PartitionIndex | None = None
    headers: tuple[_FastHeader, ...] = ()
    timestamp: NonNegative | None = None


class _FastBinaryBody(msgspec.Struct):
    records: list[_FastRecord]


_FAST_BINARY = msgspec.json.Decoder(_FastBinaryBody)


_SCANNER = json.JSONDecoder()
_BLANK = frozenset(" \t\n\r")


def _skip_blank(text: str, at: int) -> int:
    while at < len(text) and text[at] in _BLANK:
        at += 1
    return at


def records_within(raw: bytes, limit: int) -> bool:
    """Whether the produce body's `records` array has at most `limit` items, found without parsing more than
    `limit` + 1 of them: an 8 MiB body holds 2.8 million empty records, and parsing them all (msgspec or
    pydantic) before counting took 0.1 to 9 s of the event loop. Every record is an object, so a body with no
    more `{` than the limit passes at the cost of one count in C; otherwise the top-level object is walked
    with the json module's C scanner, one record at a time, stopping at the first over the limit. A body
    that is not such an object passes: its parser refuses it with its own message."""
    if raw.count(b"{") <= limit + 1:
        return True
    try:
        text = raw.decode()
        at = _skip_blank(text, 0)
        if text[at:at + 1] != "{":
            return True
        at = _skip_blank(text, at + 1)
        while text[at:at + 1] == '"':
            key, at = _SCANNER.raw_decode(text, at)
            at = _skip_blank(text, at)
            if text[at:at + 1] != ":":
                return True
            at = _skip_blank(text, at + 1)
            if key != "records" or text[at:at + 1] != "[":
                _, at = _SCANNER.raw_decode(text, at)
            else:
                count = 0
                at = _skip_blank(text, at + 1)
                while text[at:at + 1] not in ("]", ""):
                    count += 1
                    if count > limit:
                        return False
                    _, at = _SCANNER.raw_decode(text, at)
                    at = _skip_blank(text, at)
                    if text[at:at + 1] == ",":
                        at = _skip_blank(text, at + 1)
                return True
            at = _skip_blank(text, at)
            if text[at:at + 1] == ",":
                at = _skip_blank(text, at + 1)
    except (UnicodeDecodeError, ValueError):
        pass
    return True


def parse_produce(fmt: str, raw: bytes) -> Sequence[ProduceRecord]:
    """The records of a produce body in embedded format `fmt`; RestError as parse_json for a bad body."""
    if fmt == "binary":
        try:
            records = _FAST_BINARY.decode(raw).records
        except (msgspec.ValidationError, msgspec.DecodeError):
            records = []
        if records:
            return records
    return parse_json(PRODUCE_BODIES[fmt], raw).records


# A name no topic can have is refused with the body (422), before a consumer is asked about it.
TopicName = Annotated[StrictStr, Field(pattern=TOPIC_NAME.pattern)]


class PartitionRef(Body):
    topic: TopicName
    partition: StrictInt = Field(ge=0, le=INT32_MAX)


class PartitionsBody(Body):
    partitions: list[PartitionRef]


class OffsetRef(PartitionRef):
    offset: StrictInt = Field(ge=0, le=INT64_MAX)
    metadata: str = ""


class OffsetsBody(Body):
    offsets: list[OffsetRef] = Field(default_factory=list)


class SubscriptionBody(Body):
    topics: list[TopicName] | None = Field(None, min_length=1)
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


def parse_json(model: type[M], raw: bytes, code: int = INVALID_REQUEST, required: bool = True) -> M:
    """`raw` parsed and validated in one pass: 400 for what is not a JSON object, 422 for an object that is
    not what `model` says. An empty body is `model`'s defaults unless `required`."""
    if not raw or raw.isspace():
        if required:
            raise RestError(400, 400, "the request needs a JSON body")
        raw = b"{}"
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] == "json_invalid":
            raise RestError(400, 400, f"the body is not JSON: {first['msg']}") from None
        if not first["loc"] and first["type"] == "model_type":
            raise RestError(400, 400, "the body must be a JSON object") from None
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors())
        raise RestError(422, code, problems[:1000]) from None
