"""The broker's HTTP client of the controller behind a Service: after an operator failover the Service
sends new connections to the new leader, but a keep-alive connection stays with the pod it was made
to. A connection that gave something other than the controller's answer must not be used again."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from dm_broker.controller.client import ControllerUnavailable, HttpControllerClient


class SwitchingProxy:
    """A TCP proxy whose new connections go to the current target (what kube-proxy does for a
    Service whose endpoints changed); established ones stay where they are."""

    def __init__(self) -> None:
        self.target = 0
        self.connections = 0

    async def start(self) -> int:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.server = server
        return server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except ConnectionError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


async def _site(app: web.Application) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


async def test_a_connection_that_did_not_reach_the_controller_is_not_reused():
    async def not_here(_: web.Request) -> web.Response:
        return web.Response(status=404, text="not here")

    async def cluster(_: web.Request) -> web.Response:
        return web.json_response({"cluster_id": "c1", "incarnation": "i1"})

    standby = web.Application()
    standby.router.add_route("*", "/{tail:.*}", not_here)
    leader = web.Application()
    leader.router.add_get("/v1/cluster", cluster)
    standby_runner, standby_port = await _site(standby)
    leader_runner, leader_port = await _site(leader)
    proxy = SwitchingProxy()
    proxy.target = standby_port
    client = HttpControllerClient(f"http://127.0.0.1:{await proxy.start()}", timeout_s=5)
    try:
        with pytest.raises(ControllerUnavailable, match="404"):
            await client.cluster_info()
        proxy.target = leader_port  # the Service now points at the new leader
        info = await client.cluster_info()
        assert info.cluster_id == "c1"
        assert proxy.connections == 2
    finally:
        await client.close()
        proxy.server.close()
        await standby_runner.cleanup()
        await leader_runner.cleanup()
