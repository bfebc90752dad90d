"""An aiohttp site whose connections count against the broker's descriptor budget (ADR 0045).

The Kafka listeners close a connection at once when the open-file limit leaves no descriptor beside what
the logs need; without this, the REST Proxy's connections drew on the descriptors kept for new segments
and could still fill the limit. aiohttp's `TCPSite.start` is followed, with a protocol factory that
refuses past the budget. The health and metrics port only counts: its probes must be answered during a
flood of client connections (a failed liveness probe restarts the broker), and only probes and scrapes
reach it.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable

from aiohttp import web

from ..connection_quotas import ConnectionQuotas


class _Refused(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.abort()  # type: ignore[attr-defined]


class BudgetedSite(web.TCPSite):
    def __init__(self, runner: web.BaseRunner, host: str | None, port: int, quotas: ConnectionQuotas,
                 on_refused: Callable[[], None] | None, ssl_context: ssl.SSLContext | None = None) -> None:
        """`on_refused`: None for a site whose connections are counted but never refused."""
        super().__init__(runner, host, port, ssl_context=ssl_context)
        self._quotas = quotas
        self._on_refused = on_refused

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None
        self._quotas.count_also(lambda: len(server.connections))
        quotas, refused = self._quotas, self._on_refused

        def accepted() -> asyncio.BaseProtocol:
            if refused is None or quotas.descriptors_left():
                return server()
            refused()
            return _Refused()

        self._server = await asyncio.get_running_loop().create_server(
            accepted, self._host, self._port, ssl=self._ssl_context, backlog=self._backlog,
            reuse_address=self._reuse_address, reuse_port=self._reuse_port)
        self._bound_port = self._server.sockets[0].getsockname()[1] if self._server.sockets else self._port
