"""A minimal asyncio Kafka wire client on kio schemas.

Used by brokers to talk to each other (follower fetch) and by tests that need exact control
over requests (duplicate batches, corrupt CRCs, specific API versions).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import struct
from typing import TYPE_CHECKING, Any

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from ..security.sasl_client import client_exchange
from . import bounds
from .codec import API_VERSIONS_KEY, request_class, response_class
from .framing import FrameProtocol, open_frame_connection

if TYPE_CHECKING:
    from ..security.client_security import ClientSecurity

SIZE = struct.Struct(">i")


def encode_request(api_key: int, version: int, correlation_id: int, body: Any, client_id: str = "dm") -> bytes:
    cls = request_class(api_key, version)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(header_cls)(buf, header_cls(request_api_key=api_key, request_api_version=version,
                                              correlation_id=correlation_id, client_id=client_id))
    entity_writer(cls)(buf, body)
    size = buf.tell() - 4
    buf.seek(0)
    buf.write(SIZE.pack(size))
    return buf.getvalue()


def decode_response(api_key: int, version: int, frame: bytes | memoryview) -> tuple[int, Any]:
    cls = response_class(api_key, version)
    flexible = cls.__flexible__ and api_key != API_VERSIONS_KEY
    header_cls = ResponseHeaderV1 if flexible else ResponseHeaderV0
    header, offset = entity_reader(header_cls)(frame, 0)
    bounds.check(cls, frame, offset)  # a forged length must not abort this process either
    body, _ = entity_reader(cls)(frame, offset)
    return header.correlation_id, body


def check_correlation(frame: bytes | memoryview, expected: int) -> None:
    """Every response header starts with the request's correlation id."""
    (got,) = SIZE.unpack_from(frame, 0)
    if got != expected:
        raise ConnectionError(f"correlation id {got} does not match request {expected}")


class KafkaConnection:
    """One connection; requests are answered in order, so one lock serialises them."""

    def __init__(self, conn: FrameProtocol, client_id: str) -> None:
        self.conn = conn
        self.client_id = client_id
        self._correlation = 0
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, host: str, port: int, client_id: str = "dm", timeout: float = 10,
                   security: ClientSecurity | None = None) -> KafkaConnection:
        """A connection, over TLS and authenticated with SASL when `security` says so (how brokers
        reach each other's inter-broker listener)."""
        context = security.ssl_context if security is not None else None
        conn = cls(await asyncio.wait_for(open_frame_connection(host, port, context), timeout), client_id)
        if security is not None and security.sasl:
            try:
                await asyncio.wait_for(conn._authenticate(security), timeout)
            except BaseException:
                await conn.close(0)
                raise
        return conn

    async def _authenticate(self, security: ClientSecurity) -> None:
        from kio.schema.errors import ErrorCode

        from .build import make

        handshake = await self.request(make(request_class(17, 1), mechanism=security.mechanism))
        if handshake.error_code != ErrorCode.none:
            raise ConnectionError(f"SASL handshake ({security.mechanism}): {handshake.error_code.name}, offered "
                                  f"{list(handshake.mechanisms)}")

        exchange = client_exchange(security.mechanism, security.username, security.password)
        token = next(exchange)
        while True:
            resp = await self.request(make(request_class(36, 2), auth_bytes=token))
            if resp.error_code != ErrorCode.none:
                raise ConnectionError(f"SASL authentication as {security.username} failed: {resp.error_message}")
            try:
                token = exchange.send(bytes(resp.auth_bytes))
            except StopIteration:
                return

    async def request(self, body: Any, timeout: float = 30) -> Any:
        frame = await self.request_frame(body, timeout)
        return decode_response(int(body.__api_key__), int(body.__version__), frame)[1]

    async def request_frame(self, body: Any, timeout: float = 30) -> memoryview:
        """Sends a request; returns the undecoded response frame, its correlation id checked."""
        async with self._lock:
            self._correlation += 1
            correlation_id = self._correlation
            self.conn.write(encode_request(int(body.__api_key__), int(body.__version__), correlation_id, body,
                                           self.client_id))
            await self.conn.drain()
            frame = await asyncio.wait_for(self.conn.read_frame(), timeout)
        check_correlation(frame, correlation_id)
        return frame

    @property
    def closed(self) -> bool:
        """The peer (or this side) closed it: a request on it cannot be sent."""
        return self.conn.closed

    def abort(self) -> None:
        self.conn.abort()

    async def send_raw(self, frame: bytes) -> None:
        self.conn.write(frame)
        await self.conn.drain()

    async def read_frame(self, timeout: float = 10) -> memoryview:
        return await asyncio.wait_for(self.conn.read_frame(), timeout)

    async def close(self, wait_s: float = 2) -> None:
        """Closes after the queued writes are sent; a peer that does not read them within
        `wait_s` gets the connection aborted instead of holding this close up."""
        self.conn.close()
        with contextlib.suppress(ConnectionError, OSError, TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.conn.wait_closed()), wait_s)
            return
        self.conn.abort()
