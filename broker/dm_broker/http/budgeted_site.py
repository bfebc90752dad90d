"""An aiohttp application served where its connections count against the broker's descriptor budget
(ADR 0045).

The Kafka listeners close a connection at once when the open-file limit leaves no descriptor beside what
the logs need; without this, the REST Proxy's connections drew on the descriptors kept for new segments
and could still fill the limit. The application's runner is served by an asyncio server of our own whose
protocol factory refuses past the budget and otherwise hands the connection to the runner's low-level
`Server` (public aiohttp API only: an aiohttp site would have to be subclassed through its private
attributes, which aiohttp changes between releases). The health and metrics port only counts: its
probes must be answered during a flood of client connections (a failed liveness probe restarts the
broker), and only probes and scrapes reach it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable

from aiohttp import web

from ..connection_quotas import ConnectionQuotas


class _Refused(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.abort()  # type: ignore[attr-defined]


class BudgetedSite:
    """Serves a set-up `runner` on host:port until `cleanup`, which also cleans the runner up."""

    def __init__(self, runner: web.AppRunner, host: str | None, port: int, quotas: ConnectionQuotas | None,
                 on_refused: Callable[[], None] | None, ssl_context: ssl.SSLContext | None = None) -> None:
        """`quotas`: None for a site that neither counts nor refuses; `on_refused`: None for one whose
        connections are counted but never refused."""
        self.runner = runner
        self._address = (host, port)
        self._quotas = quotas
        self._on_refused = on_refused
        self._ssl_context = ssl_context
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        handler = self.runner.server
        if handler is None:
            raise RuntimeError("the runner is not set up")
        quotas, refused = self._quotas, self._on_refused
        if quotas is not None:
            quotas.count_also(lambda: len(handler.connections))

        def accepted() -> asyncio.BaseProtocol:
            if quotas is None or refused is None or quotas.descriptors_left():
                return handler()
            refused()
            return _Refused()

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
