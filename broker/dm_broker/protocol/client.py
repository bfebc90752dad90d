"""A minimal asyncio Kafka wire client on kio schemas.

Used by brokers to talk to each other (follower fetch) and by tests that need exact control
over requests (duplicate batches, corrupt CRCs, specific API versions).
"""

from __future__ import annotations

import asyncio
import io
import struct
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from . import bounds
from .codec import API_VERSIONS_KEY, request_class, response_class

SIZE = struct.Struct(">i")


def encode_request(api_key: int, version: int, correlation_id: int, body: Any, client_id: str = "dm") -> bytes:
    cls = request_class(api_key, version)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(header_cls)(buf, header_cls(request_api_key=api_key, request_api_version=version,
                                              correlation_id=correlation_id, client_id=client_id))
    entity_writer(cls)(buf, body)
    data = bytearray(buf.getvalue())
    SIZE.pack_into(data, 0, len(data) - 4)
    return bytes(data)


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    cls = response_class(api_key, version)
    flexible = cls.__flexible__ and api_key != API_VERSIONS_KEY
    header_cls = ResponseHeaderV1 if flexible else ResponseHeaderV0
    header, offset = entity_reader(header_cls)(frame, 0)
    bounds.check(cls, frame, offset)  # a forged length must not abort this process either
    body, _ = entity_reader(cls)(frame, offset)
    return header.correlation_id, body


class KafkaConnection:
    """One connection; requests are answered in order, so one lock serialises them."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str) -> None:
        self.reader = reader
        self.writer = writer
        self.client_id = client_id
        self._correlation = 0
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, host: str, port: int, client_id: str = "dm", timeout: float = 10) -> KafkaConnection:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, limit=1 << 20), timeout)
        return cls(reader, writer, client_id)

    async def request(self, body: Any, timeout: float = 30) -> Any:
        api_key = int(body.__api_key__)
        version = int(body.__version__)
        async with self._lock:
            self._correlation += 1
            correlation_id = self._correlation
            self.writer.write(encode_request(api_key, version, correlation_id, body, self.client_id))
            await self.writer.drain()
            frame = await asyncio.wait_for(self._read_frame(), timeout)
        got, response = decode_response(api_key, version, frame)
        if got != correlation_id:
            raise ConnectionError(f"correlation id {got} does not match request {correlation_id}")
        return response

    async def send_raw(self, frame: bytes) -> None:
        self.writer.write(frame)
        await self.writer.drain()

    async def _read_frame(self) -> bytes:
        (size,) = SIZE.unpack(await self.reader.readexactly(4))
        return await self.reader.readexactly(size)

    async def read_frame(self, timeout: float = 10) -> bytes:
        return await asyncio.wait_for(self._read_frame(), timeout)

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass
