"""An aiohttp application served where its connections count against the broker's limits (ADRs 0045, 0059).

The Kafka listeners close a connection at once when the open-file limit leaves no descriptor beside what
the logs need; without this, the REST Proxy's connections drew on the descriptors kept for new segments
and could still fill the limit. The application's runner is served by an asyncio server of our own whose
protocols are aiohttp's own request handlers, each behind a guard (public aiohttp API only: an aiohttp site
would have to be subclassed through its private attributes, which aiohttp changes between releases).

A listener that refuses (the REST Proxy's) applies Kafka's per-address limits (`max.connections.per.ip`, its
overrides, `listener.name.<listener>.max.connections`) and holds at most half the descriptors the logs
leave, so an HTTP flood never takes the Kafka listeners' (issue 65). Every listener closes a connection on
which no request arrives within `header_timeout_s`, from when it opens and from the end of each request:
aiohttp has no such timeout, and 300 connections trickling their headers were all still open after 100 s.
The health and metrics port only counts: its probes must be answered during a flood of client connections
(a failed liveness probe restarts the broker), and only probes and scrapes reach it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from typing import Any

from aiohttp import web

from ..connection_quotas import ConnectionQuotas


class _Guarded(asyncio.Protocol):
    """aiohttp's handler for one connection, behind the listener's limits and its header timeout."""

    def __init__(self, site: BudgetedSite, inner: Any) -> None:
        self.site = site
        self.inner = inner
        self.transport: asyncio.Transport | None = None
        self.host: str | None = None  # counted against the quotas under this address
        self.admitted = False  # handed to aiohttp's handler (a refused connection never is)
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio's classes
        site = self.site
        if site.refuses:
            peer = transport.get_extra_info("peername")
            host = peer[0] if peer else ""
            refused = site.quotas.http_refusal(site.name, host)  # type: ignore[union-attr]
            if refused is not None:
                site.on_refused(refused)  # type: ignore[misc]
                transport.abort()
                return
            self.host = host
        site.guards[transport] = self
        self.admitted = True
        self.waiting()
        self.inner.connection_made(transport)

    def waiting(self) -> None:
        """No request is being handled: the next one's headers must arrive within the timeout."""
        self.cancel_timer()
        self._timer = asyncio.get_running_loop().call_later(self.site.header_timeout_s, self._expire)

    def cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        if self.transport is not None and not self.transport.is_closing():
            self.site.expired += 1
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.cancel_timer()
        if self.transport is not None:
            self.site.guards.pop(self.transport, None)
        if self.host is not None:
            self.site.quotas.http_release(self.site.name, self.host)  # type: ignore[union-attr]
            self.host = None
        if self.admitted:
            self.admitted = False
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class BudgetedSite:
    """Serves a set-up `runner` on host:port until `cleanup`, which also cleans the runner up."""

    def __init__(self, runner: web.AppRunner, host: str | None, port: int, quotas: ConnectionQuotas | None,
                 on_refused: Callable[[], None] | None, ssl_context: ssl.SSLContext | None = None,
                 name: str = "HTTP", header_timeout_s: float = 30.0) -> None:
        """`quotas`: None for a site that neither counts nor refuses; `on_refused`: None for one whose
        connections are counted but never refused. `name`: the listener's (per-listener limits)."""
        self.runner = runner
        self.name = name
        self.quotas = quotas
        self._on_refused = on_refused
        self.header_timeout_s = header_timeout_s
        self._address = (host, port)
        self._ssl_context = ssl_context
        self._server: asyncio.Server | None = None
        self.guards: dict[asyncio.BaseTransport, _Guarded] = {}
        self.expired = 0  # connections closed for sending no request in time

    @property
    def refuses(self) -> bool:
        return self.quotas is not None and self._on_refused is not None

    def on_refused(self, _why: str) -> None:
        if self._on_refused is not None:
            self._on_refused()

    async def start(self) -> None:
        handler = self.runner.server
        if handler is None:
            raise RuntimeError("the runner is not set up")
        if self.quotas is not None and not self.refuses:
            self.quotas.count_also(lambda: len(handler.connections))
        handle = handler.request_handler
        guards = self.guards

        async def guarded(request: web.BaseRequest) -> web.StreamResponse:
            guard = guards.get(request.transport) if request.transport is not None else None
            if guard is not None:
                guard.cancel_timer()  # a request arrived: its handling takes the time it takes
            try:
                return await handle(request)
            finally:
                if guard is not None and guard.transport is not None and not guard.transport.is_closing():
                    guard.waiting()

        handler.request_handler = guarded

        def accepted() -> asyncio.BaseProtocol:
            return _Guarded(self, handler())

        host, port = self._address
        self._server = await asyncio.get_running_loop().create_server(accepted, host, port, ssl=self._ssl_context)

    @property
    def port(self) -> int:
        """The bound port (the requested one before `start`, which may be 0)."""
        if self._server is None or not self._server.sockets:
            return self._address[1]
        return self._server.sockets[0].getsockname()[1]

    async def cleanup(self) -> None:
        """Stops accepting, then lets the runner finish its requests and close its connections."""
        if self._server is not None:
            self._server.close()
        await self.runner.cleanup()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
