"""Size-prefixed Kafka frames read straight from the socket into their own buffers.

asyncio's StreamReader copies every byte twice on its way to the caller (appended to its
buffer, then sliced out by readexactly); at replication rates those copies were a fifth of a
broker's CPU. This protocol lets the event loop receive a large frame directly into a buffer of
the frame's size (``recv_into``) and hands it out without copying; small frames (headers,
metadata, heartbeats) go through a staging buffer and are copied once.

The staging buffer is one per thread, not one per connection: the event loop calls ``get_buffer``,
receives into it and calls ``buffer_updated`` in one go for one connection (asyncio's selector and
TLS transports and uvloop alike), so a connection only keeps the few bytes of a frame that has not
fully arrived. A 64 KiB buffer per connection was most of an idle connection's 76 KB (issue 31).
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import struct
import threading
from collections.abc import Callable

SIZE = struct.Struct(">i")
STAGING_BYTES = 64 << 10
OWN_BUFFER_FROM = 4 << 10  # a frame at least this large that arrived in part gets a buffer of its own
QUEUED_FRAMES_LIMIT = 2  # frames read ahead of the consumer before the socket stops being read


_per_thread = threading.local()


def _staging_buffer() -> bytearray:
    staging = getattr(_per_thread, "staging", None)
    if staging is None:
        staging = _per_thread.staging = bytearray(STAGING_BYTES)
    return staging


class FrameSizeError(Exception):
    """A frame declared a size outside the allowed range; the connection must be closed."""

    def __init__(self, size: int, low: int, high: int) -> None:
        super().__init__(f"frame size {size} outside {low}..{high}")
        self.size = size
        self.high = high


class FrameProtocol(asyncio.BufferedProtocol):
    """One connection's frames (``read_frame``) and its writes (``write``, ``drain``)."""

    def __init__(self, min_size: int = 0, max_size: int = 1 << 30,
                 on_connect: Callable[[FrameProtocol], None] | None = None) -> None:
        self.min_size = min_size
        self._on_connect = on_connect
        self.max_size = max_size
        self.transport: asyncio.Transport | None = None
        self._staging = _staging_buffer()  # shared by the thread's connections
        self._partial = b""  # the start of a small frame that has not fully arrived
        self._staged = 0  # bytes of _partial put back into the staging buffer by get_buffer
        self._frame: bytearray | None = None  # a large frame being received in place
        self._filled = 0
        self._frames: collections.deque[memoryview] = collections.deque()
        self._error: BaseException | None = None
        self._closed = False
        self._reading_paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._lost = asyncio.get_running_loop().create_future()

    # -- asyncio protocol callbacks --------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        if self._on_connect is not None:
            self._on_connect(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return memoryview(self._frame)[self._filled:]
        staged = self._staged = len(self._partial)
        if staged:
            self._staging[:staged] = self._partial
        return memoryview(self._staging)[staged:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is not None:
            self._filled += nbytes
            if self._filled == len(self._frame):
                self._push(memoryview(self._frame).toreadonly())
                self._frame = None
            return
        self._split_staged(self._staged + nbytes)

    def eof_received(self) -> bool:
        self._finish(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish(exc)
        self._writable.set()
        if not self._lost.done():
            self._lost.set_result(None)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- framing ---------------------------------------------------------------------------

    def _split_staged(self, end: int) -> None:
        staging = memoryview(self._staging)
        start = 0
        while end - start >= 4:
            (size,) = SIZE.unpack_from(staging, start)
            if not self.min_size <= size <= self.max_size:
                self._partial = b""
                self._fail(FrameSizeError(size, self.min_size, self.max_size))
                return
            body = start + 4
            have = end - body
            if have >= size:
                self._push(memoryview(bytes(staging[body:body + size])))
                start = body + size
                continue
            if size >= OWN_BUFFER_FROM:
                # The rest is received straight into a buffer of the frame's size.
                frame = bytearray(size)
                frame[:have] = staging[body:end]
                self._frame, self._filled = frame, have
                start = end
            break
        self._partial = bytes(staging[start:end]) if start < end else b""

    def _push(self, frame: memoryview) -> None:
        self._frames.append(frame)
        if len(self._frames) >= QUEUED_FRAMES_LIMIT:
            self._pause_reading()
        self._wake()

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        self._pause_reading()
        self._wake()

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None:
            self.transport.pause_reading()
            self._reading_paused = True

    def _finish(self, exc: BaseException | None) -> None:
        self._closed = True
        if exc is not None and self._error is None:
            self._error = exc
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def read_frame(self) -> memoryview:
        """The next frame (a read-only view, size prefix removed). Raises FrameSizeError for a
        frame outside the allowed sizes, IncompleteReadError at end of stream."""
        while not self._frames:
            if self._error is not None:
                raise self._error
            if self._closed:
                partial = self._partial
                raise asyncio.IncompleteReadError(partial, None)
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        frame = self._frames.popleft()
        if self._reading_paused and self._error is None and self.transport is not None \
                and len(self._frames) < QUEUED_FRAMES_LIMIT:
            self._reading_paused = False
            self.transport.resume_reading()
        return frame

    # -- writing ---------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """ConnectionResetError once the peer closed the connection (uvloop would raise RuntimeError)."""
        if self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("connection closed")
        self.transport.write(data)

    @property
    def closed(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    async def drain(self) -> None:
        if self.transport is None or self.transport.is_closing():
            await asyncio.sleep(0)  # let connection_lost run, as StreamWriter.drain does
            if self._error is not None:
                raise ConnectionResetError("connection lost") from self._error
        await self._writable.wait()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._lost)  # a cancelled waiter must not cancel the connection's own future

    @property
    def lost(self) -> asyncio.Future[None]:
        """Done once the connection is gone (to wait on beside other futures; never cancel it)."""
        return self._lost


async def open_frame_connection(host: str, port: int, ssl_context: ssl.SSLContext | None = None) -> FrameProtocol:
    loop = asyncio.get_running_loop()
    _, protocol = await loop.create_connection(FrameProtocol, host, port, ssl=ssl_context,
                                               server_hostname=host if ssl_context is not None else None)
    return protocol
