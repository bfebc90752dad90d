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

A server connection's large frame gets a buffer of FIRST_CHUNK that grows as its bytes arrive, so the
broker's memory follows what a client sent, not the size it declared (forty connections that each
declared 100 MB and sent 8 KB took 4 GB when the whole buffer was allocated at once). Each frame
reserves its declared size in the listeners' request memory (request_memory.py), and while that is used
up no connection is read.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import struct
import threading
from collections.abc import Callable

from .request_memory import RequestMemory

SIZE = struct.Struct(">i")
STAGING_BYTES = 64 << 10
OWN_BUFFER_FROM = 4 << 10  # a frame at least this large that arrived in part gets a buffer of its own
QUEUED_FRAMES_LIMIT = 2  # frames read ahead of the consumer before the socket stops being read
FIRST_CHUNK = 1 << 20  # a large frame's first buffer; it doubles (up to the frame's size) as bytes arrive


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
                 on_connect: Callable[[FrameProtocol], None] | None = None,
                 memory: RequestMemory | None = None) -> None:
        self.min_size = min_size
        self.memory = memory  # None: a client connection, whose frames are answers it asked for
        self._on_connect = on_connect
        self.max_size = max_size
        self.transport: asyncio.Transport | None = None
        self._staging = _staging_buffer()  # shared by the thread's connections
        self._partial = b""  # the start of a small frame that has not fully arrived
        self._staged = 0  # bytes of _partial put back into the staging buffer by get_buffer
        self._frame: bytearray | None = None  # a large frame being received in place
        self._frame_size = 0  # its declared size (its buffer grows to it)
        self._filled = 0
        self._waiting_memory = False
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
            if self._filled == self._frame_size:
                frame, self._frame = self._frame, None
                self._push(memoryview(frame).toreadonly())
            elif self._filled == len(self._frame):
                self._grow_frame()
            return
        self._split_staged(self._staged + nbytes)

    def _grow_frame(self) -> None:
        """The large frame's buffer is full but the frame is not: a larger one (its memory is reserved)."""
        frame = self._frame
        assert frame is not None
        grown = bytearray(min(self._frame_size, 2 * len(frame)))
        grown[:self._filled] = frame
        self._frame = grown

    def _has_memory(self) -> bool:
        """Whether memory is available; if not, reading stops until it is."""
        if self.memory is None or self.memory.available:
            return True
        if not self._waiting_memory and not self._closed:
            self._waiting_memory = True
            self._pause_reading()
            self.memory.wait(self._memory_freed)
        return False

    def _take(self, nbytes: int) -> None:
        if self.memory is not None:
            self.memory.take(nbytes)

    def _memory_freed(self) -> None:
        self._waiting_memory = False
        if self._closed or self._error is not None:
            return
        if self._partial:
            # Frames that arrived while the pool was used up wait in _partial: split them now.
            partial, self._partial = self._partial, b""
            self._staging[:len(partial)] = partial
            self._split_staged(len(partial))
        if not self._waiting_memory and len(self._frames) < QUEUED_FRAMES_LIMIT:
            self._resume_reading()

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
            if have >= size or size >= OWN_BUFFER_FROM:
                # A frame is admitted whole, as Kafka's pool admits it: what it declared is reserved, so a
                # frame that has begun never waits for memory (frames half-received, each waiting for more
                # memory held by the others, would wait for ever).
                if not self._has_memory():
                    break  # kept in _partial until memory is given back
                self._take(size)
            if have >= size:
                self._push(memoryview(bytes(staging[body:body + size])))
                start = body + size
                continue
            if size >= OWN_BUFFER_FROM:
                # The rest is received straight into a buffer of its own, which grows as it fills.
                # A client connection's frames are answers it asked for: sized at once, never copied.
                first = size if self.memory is None else min(size, max(FIRST_CHUNK, have))
                frame = bytearray(first)
                frame[:have] = staging[body:end]
                self._frame, self._frame_size, self._filled = frame, size, have
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

    def release(self) -> None:
        """Gives back what the connection holds and has not handed out: its queued frames and the frame
        it was receiving. For the server, once it reads no more of the connection."""
        if self.memory is None:
            return
        # the queued frames (taken from memory, not handed out) and the one being received
        held = sum(map(len, self._frames)) + (self._frame_size if self._frame is not None else 0)
        self._frames.clear()
        self._frame = None
        self.memory.forget(self._memory_freed)
        self._waiting_memory = False
        if held:
            self.memory.give_back(held)

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
        if self._error is None and not self._waiting_memory and len(self._frames) < QUEUED_FRAMES_LIMIT:
            self._resume_reading()
        return frame

    def _resume_reading(self) -> None:
        if self._reading_paused and self.transport is not None:
            self._reading_paused = False
            self.transport.resume_reading()

    # -- writing ---------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """ConnectionResetError once the peer closed the connection (uvloop would raise RuntimeError)."""
        if self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("connection closed")
        self.transport.write(data)

    @property
    def waiting_memory(self) -> bool:
        """Not read until the listeners' request memory has room again."""
        return self._waiting_memory

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
