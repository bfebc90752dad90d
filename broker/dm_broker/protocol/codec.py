"""Request/response (de)serialisation through kio's generated schemas.

Only the frame envelope is handled here by hand: a 4-byte size, then a request header whose
version follows the API's flexible versions, then the body. Readers and writers are cached per
(api key, version) so the per-request cost is one native parse.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from . import bounds

API_KEY_VERSION = struct.Struct(">hh")
CORRELATION = struct.Struct(">i")
SIZE = struct.Struct(">i")
API_VERSIONS_KEY = 18


class ProtocolError(Exception):
    """The frame cannot be understood; the connection is closed."""


class TooManyElements(ProtocolError):
    """The request has more array elements than socket.request.max.elements; the connection is closed."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@cache
def request_class(api_key: int, version: int) -> type:
    return load_request_schema(api_key, version)


@cache
def response_class(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)


@cache
def _reader(cls: type):
    return entity_reader(cls)


@cache
def _writer(cls: type):
    return entity_writer(cls)


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """api key, api version and correlation id: readable for any API, known or not."""
    if len(frame) < 8:
        raise ProtocolError("request shorter than a request header")
    api_key, api_version = API_KEY_VERSION.unpack_from(frame, 0)
    (correlation_id,) = CORRELATION.unpack_from(frame, 4)
    return api_key, api_version, correlation_id


def decode_request(frame: bytes, flexible: bool) -> tuple[RequestHeader, int]:
    """Parses the request header; returns it and the offset where the body starts."""
    header_cls = RequestHeaderV2 if flexible else RequestHeaderV1
    try:
        header, size = _reader(header_cls)(frame, 0)
    except Exception as exc:
        raise ProtocolError(f"malformed request header: {exc}") from exc
    return RequestHeader(header.request_api_key, header.request_api_version, header.correlation_id,
                         header.client_id), size


def decode_body(frame: bytes | memoryview, offset: int, cls: type,
                max_elements: int = bounds.NO_LIMIT) -> tuple[Any, int]:
    """The request body and how many array elements it has (bounds.check)."""
    try:
        elements = bounds.check(cls, frame, offset, max_elements)
    except bounds.TooManyElements as exc:
        raise TooManyElements(f"{cls.__name__} refused: {exc}") from None
    except bounds.BoundsError as exc:
        raise ProtocolError(f"malformed {cls.__name__}: {exc}") from None
    try:
        body, _ = _reader(cls)(frame, offset)
    except Exception as exc:
        raise ProtocolError(f"malformed {cls.__name__}: {exc}") from exc
    # Trailing bytes are ignored, as Kafka does: librdkafka 2.x sends some after Metadata v12.
    return body, elements


def encode_response(correlation_id: int, response: Any, flexible_header: bool) -> bytes:
    """A whole response frame, size prefix included."""
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    header_cls = ResponseHeaderV1 if flexible_header else ResponseHeaderV0
    _writer(header_cls)(buf, header_cls(correlation_id=correlation_id))
    _writer(type(response))(buf, response)
    size = buf.tell() - 4
    buf.seek(0)
    buf.write(SIZE.pack(size))
    return buf.getvalue()


@dataclass(frozen=True, slots=True)
class EncodedResponse:
    """A response a handler encoded itself (the zero-copy Fetch path, cached Metadata), as frame chunks."""

    chunks: list[Any]  # bytes-like, or FileSlice for record data sent from the segment file
    flexible_header: bool = False
    throttle_first: bool = False  # the body starts with throttle_time_ms (Fetch, Metadata v3+)

    def with_throttle(self, throttle_ms: int) -> EncodedResponse:
        """The same response with `throttle_time_ms` set (a client quota's), when it has the field."""
        if not self.throttle_first:
            return self
        at = 8 + (1 if self.flexible_header else 0)  # size, correlation id, the header's tagged fields
        chunks, pos = list(self.chunks), 0
        for i, chunk in enumerate(chunks):
            if pos <= at and at + 4 <= pos + len(chunk):
                data = bytes(chunk)
                chunks[i] = data[:at - pos] + SIZE.pack(throttle_ms) + data[at - pos + 4:]
                break
            pos += len(chunk)
        return EncodedResponse(chunks, self.flexible_header, self.throttle_first)

