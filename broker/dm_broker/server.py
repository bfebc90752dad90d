"""The Kafka listener: framing, one request at a time per connection, responses in order.

Like Kafka, a connection's next request is read only after the previous one is answered (the
client pipelines; the socket buffers), so a client's produce requests are appended in the order
it sent them. A malformed or oversized frame closes only that connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
import weakref
from typing import Any

from .connection_quotas import ConnectionQuotas
from .log import dir_failure
from .log.segment import FileSlice
from .log_limits import RateLimitedLog
from .protocol.codec import ProtocolError
from .protocol.dispatch import Dispatcher
from .protocol.framing import FrameProtocol, FrameSizeError
from .protocol.request_memory import RequestMemory
from .security.listeners import Listener
from .security.session import Session
from .security.setup import SecuritySetup
from .security.tls import peer_subject
from .tasks import stop_tasks

log = logging.getLogger(__name__)
unauthenticated = RateLimitedLog(log)  # lines any client can make the broker write (issue 65)


def shown_error(exc: BaseException) -> str:
    """An error about what a client sent, as a log line quotes it: at most a few hundred characters."""
    text = str(exc)
    return text if len(text) <= 300 else f"{text[:300]}... ({len(text)} characters)"
MIN_FRAME = 8  # api key, api version, correlation id
WRITE_BUFFER_LIMIT = 1 << 20
MAX_PIPELINED = 5  # requests of one connection in progress at once (librdkafka sends up to 5)
IDLE_SWEEP_SECONDS = 30
TLS_HANDSHAKE_TIMEOUT_S = 10


def _handshake_outcome(connected: list[bool], listener: str, metrics: Any) -> None:
    """Runs when a TLS listener's protocol object goes away: if it never got a connection, the
    handshake failed (an untrusted, missing or expired client certificate, plaintext, an old TLS
    version) or the client left before finishing it."""
    if not connected[0]:
        metrics.authentications.labels(listener, "SSL", "failure").inc()
        unauthenticated.info(f"tls {listener}", "listener %s: a TLS handshake failed (the client's certificate, CA "
                             "or TLS version was refused, or it spoke plaintext)", listener)


def _release(ordered: asyncio.Future[None], _: asyncio.Task[Any]) -> None:
    if not ordered.done():
        ordered.set_result(None)


def _give_back(memory: RequestMemory, nbytes: int, _: asyncio.Future[None]) -> None:
    memory.give_back(nbytes)


class KafkaServer:
    """One Kafka listener."""

    def __init__(self, dispatcher: Dispatcher, listener: Listener, security: SecuritySetup, max_request_bytes: int,
                 idle_ms: int, quotas: ConnectionQuotas | None = None) -> None:
        self.dispatcher = dispatcher
        self.quotas = quotas  # shared by the broker's listeners
        self.listener = listener
        self.security = security
        self.metrics = dispatcher.broker.metrics
        self.memory = dispatcher.broker.request_memory
        self.max_request_bytes = max_request_bytes
        self.idle_seconds = idle_ms / 1000
        self._server: asyncio.base_events.Server | None = None
        self._connections: dict[FrameProtocol, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._reloader: asyncio.Task[None] | None = None

    async def bind(self) -> int:
        """Takes the listener's port (the broker registers it) without accepting a connection yet: until
        the broker has the cluster's metadata, a connection attempt is refused and the client tries
        another broker (ADR 0052). Returns the port."""
        loop = asyncio.get_running_loop()
        tls = self.security.tls.get(self.listener.name)
        self._server = await loop.create_server(
            self._protocol, self.listener.host or None, self.listener.port, backlog=1024,
            ssl=tls.context if tls is not None else None,
            ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if tls is not None else None, start_serving=False)
        return self._server.sockets[0].getsockname()[1]

    async def serve(self) -> None:
        """Accepts connections from now on."""
        assert self._server is not None, "bind() first"
        tls = self.security.tls.get(self.listener.name)
        await self._server.start_serving()
        self._sweeper = asyncio.create_task(self._sweep_idle())
        if tls is not None:
            self._reloader = asyncio.create_task(tls.keep_current())

    def _protocol(self) -> FrameProtocol:
        # Until a SASL client has authenticated no frame larger than sasl.server.max.receive.size is
        # read (as Kafka): an anonymous peer cannot make the broker allocate 100 MiB buffers.
        limit = self.max_request_bytes
        if self.listener.sasl:
            limit = min(limit, self.security.config.for_listener(self.listener.name, "sasl.server.max.receive.size"))
        if not self.listener.tls:
            return FrameProtocol(MIN_FRAME, limit, on_connect=self._accepted, memory=self.memory)
        # The TLS handshake runs before the protocol hears of the connection, and one that fails never
        # reaches it: it is counted when the protocol object is dropped without having connected.
        connected = [False]
        conn = FrameProtocol(MIN_FRAME, limit, on_connect=functools.partial(self._accepted_tls, connected),
                             memory=self.memory)
        weakref.finalize(conn, _handshake_outcome, connected, self.listener.name, self.metrics)
        return conn

    def _accepted_tls(self, connected: list[bool], conn: FrameProtocol) -> None:
        connected[0] = True
        self._accepted(conn)

    def _accepted(self, conn: FrameProtocol) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(conn))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        await stop_tasks(self._sweeper, self._reloader)
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            conn.close()
        await stop_tasks(*self._tasks)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _sweep_idle(self) -> None:
        while True:
            await asyncio.sleep(IDLE_SWEEP_SECONDS)
            now = time.monotonic()
            for conn, last in list(self._connections.items()):
                # A connection waiting for request memory is held back by the broker, not idle.
                if now - last > self.idle_seconds and conn.transport is not None and not conn.waiting_memory:
                    log.info("closing idle connection %s", conn.transport.get_extra_info("peername"))
                    conn.close()

    def _write(self, transport: asyncio.Transport, chunks: list) -> None:
        """Writes a response; record data in FileSlices goes out with sendfile(2) while the
        socket takes it directly (nothing queued before it), and through pread otherwise. Never
        sendfile under TLS: the kernel would put plaintext into the encrypted stream."""
        pending: list = []
        zero_copy = not self.listener.tls
        for chunk in chunks:
            if not isinstance(chunk, FileSlice):
                pending.append(chunk)
                continue
            if pending:
                transport.writelines(pending)
                pending = []
            sent = 0
            if zero_copy and transport.get_write_buffer_size() == 0:
                sent = self._sendfile(transport, chunk)
            if sent < chunk.size:
                transport.write(os.pread(chunk.fd, chunk.size - sent, chunk.position + sent))
        if pending:
            transport.writelines(pending)

    @staticmethod
    def _sendfile(transport: asyncio.BaseTransport, chunk: FileSlice) -> int:
        sock = transport.get_extra_info("socket")
        if sock is None:
            return 0
        sent = 0
        try:
            while sent < chunk.size:
                n = os.sendfile(sock.fileno(), chunk.fd, chunk.position + sent, chunk.size - sent)
                if n == 0:
                    break
                sent += n
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            pass  # e.g. sendfile unsupported here: the caller sends the rest with pread
        return sent

    async def _serve(self, conn: FrameProtocol) -> None:
        """Reads a connection's requests in order. The next request is read when the previous
        one is answered, or earlier when its handler says order no longer depends on it (an
        acks=all produce whose batches are appended and which only waits for the ISR), up to
        MAX_PIPELINED requests; responses are written in request order by `_respond`."""
        transport = conn.transport
        assert transport is not None
        peername = transport.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if peername else "?"
        host = peername[0] if peername else ""
        refused = self.quotas.refusal(self.listener.name, host) if self.quotas is not None else None
        if refused is not None:
            self.metrics.connections_refused.labels(self.listener.name).inc()
            unauthenticated.info("refused", "listener %s: refusing a connection from %s: %s", self.listener.name, host,
                                 refused)
            conn.abort()
            conn.release()
            return
        try:
            await self._serve_counted(conn, transport, peer, host)
        finally:
            conn.release()  # what it received and nobody read: given back to the request memory
            if self.quotas is not None:
                self.quotas.release(self.listener.name, host)

    async def _serve_counted(self, conn: FrameProtocol, transport: asyncio.BaseTransport, peer: str,
                             host: str) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for option, name in ((socket.SO_SNDBUF, "socket.send.buffer.bytes"),
                                 (socket.SO_RCVBUF, "socket.receive.buffer.bytes")):
                size = self.security.config[name]
                if size != -1:  # -1: the kernel's autotuning
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, option, size)
        self.metrics.connections.inc()
        self._connections[conn] = time.monotonic()
        loop = asyncio.get_running_loop()
        session = await self._open_session(conn, host)
        if session is None:
            self.metrics.connections.dec()
            self._connections.pop(conn, None)
            conn.abort()
            return
        # Larger frames are read from the moment the login succeeds, not from the serving loop's next turn: a
        # frame the client sent right after the answer was measured against the login's limit and refused.
        session.on_authenticated = functools.partial(setattr, conn, "max_size", self.max_request_bytes)
        answers: asyncio.Queue[asyncio.Task[Any]] = asyncio.Queue(MAX_PIPELINED)
        responder = loop.create_task(self._respond(conn, answers, peer))
        try:
            while True:
                if session.authenticated and conn.max_size != self.max_request_bytes:
                    conn.max_size = self.max_request_bytes
                muted = session.muted_until - time.monotonic()
                if muted > 0:  # throttled by a client quota (KIP-219: the channel is muted meanwhile)
                    await asyncio.sleep(muted)
                frame = await conn.read_frame()
                self._connections[conn] = time.monotonic()
                ordered = loop.create_future()
                # Its memory is given back once its handler is through or says order no longer depends on
                # it (an acks=all produce whose batches are appended), as Kafka releases a request's buffer.
                ordered.add_done_callback(functools.partial(_give_back, self.memory, len(frame)))
                task = loop.create_task(self.dispatcher.handle(frame, peer, session, ordered))
                task.add_done_callback(functools.partial(_release, ordered))  # a finished request is ordered too
                await answers.put(task)
                if not session.authenticated and not await self._answered_before_leaving(conn, ordered):
                    task.cancel()  # a login waiting its turn (login_guard) for a client that left: dropped
                    return
                await ordered
                if responder.done() or (task.done() and not task.cancelled() and task.exception() is not None):
                    await responder  # it answers what came before, then logs the failure and closes
                    return
                if session.close_after_response:  # failed authentication: answered, then closed
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(answers.join(), 10)
                    with contextlib.suppress(ConnectionError, TimeoutError):
                        await asyncio.wait_for(conn.drain(), 5)
                    return
        except BaseException as exc:
            self._log_close(peer, exc)
        finally:
            # Every queued request is appended or answered by now (each was read only after the
            # previous one released its order); what is left only waits to be confirmed.
            await stop_tasks(responder)
            while not answers.empty():
                answers.get_nowait().cancel()
            session.close()
            self.metrics.connections.dec()
            self._connections.pop(conn, None)
            conn.close()

    @staticmethod
    async def _answered_before_leaving(conn: FrameProtocol, ordered: asyncio.Future[None]) -> bool:
        """Before authentication: whether the request is through before the client hangs up."""
        await asyncio.wait({ordered, conn.lost}, return_when=asyncio.FIRST_COMPLETED)
        return ordered.done()

    async def _respond(self, conn: FrameProtocol, answers: asyncio.Queue[asyncio.Task[Any]], peer: str) -> None:
        transport = conn.transport
        assert transport is not None
        try:
            while True:
                task = await answers.get()
                response = await task
                # a client that went away (mid long-poll, join, fsync) still has every request it
                # sent handled (acks=0 batches are appended), only the responses are dropped
                if response is not None and not transport.is_closing():
                    self._write(transport, response)
                    if transport.get_write_buffer_size() > WRITE_BUFFER_LIMIT:
                        await conn.drain()
                answers.task_done()
        except BaseException as exc:
            dir_failure.check(exc)  # a storage error a handler did not expect still stops the broker
            self._log_close(peer, exc)
            conn.close()

    async def _open_session(self, conn: FrameProtocol, host: str) -> Session | None:
        """The connection's session, with an mTLS client's principal taken from its certificate
        (None when the certificate maps to no principal: the connection is refused)."""
        listener = self.listener
        session = self.security.session(listener, host)
        if not listener.tls or conn.transport is None:
            return session
        subject = peer_subject(conn.transport.get_extra_info("ssl_object"))
        session.client_subject = subject
        if subject is not None and not listener.sasl:
            try:
                session.principal = self.security.principal_from_certificate(subject)
            except ValueError as exc:
                self.metrics.authentications.labels(listener.name, "SSL", "failure").inc()
                unauthenticated.warning("certificate", "listener %s: refusing %s: %s", listener.name, host, exc)
                return None
        self.metrics.authentications.labels(listener.name, "SSL", "success").inc()
        return session

    def _log_close(self, peer: str, exc: BaseException) -> None:
        if isinstance(exc, FrameSizeError):
            self.metrics.closed_bad_frames.inc()
            why = "socket.request.max.bytes" if exc.high == self.max_request_bytes else \
                "sasl.server.max.receive.size, before authentication"
            unauthenticated.warning("frame size", "closing %s: request size %d outside %d..%d (%s)", peer, exc.size,
                                    MIN_FRAME, exc.high, why)
        elif isinstance(exc, ProtocolError):
            self.metrics.closed_bad_frames.inc()
            unauthenticated.warning("bad frame", "closing %s: %s", peer, shown_error(exc))
        elif not isinstance(exc, asyncio.IncompleteReadError | ConnectionError | asyncio.CancelledError):
            # CancelledError: the server is shutting down; the others: the client went away
            log.error("closing %s after an unexpected error", peer, exc_info=exc)
