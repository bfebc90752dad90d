"""Events go out on a best-effort lane: an API server that never answers them must not hold up
the calls that save the controller's state, and a dropped event is not an error.

The fault (an API server that accepts an Event POST and never answers) cannot be produced on
demand by a real one, so a small real HTTP server plays it; everything else is the real client.
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from dm_operator.events import post_event
from dm_operator.kube import Kube
from kubernetes import client


@pytest.fixture
async def hanging_events_api() -> AsyncIterator[str]:
    async def hang(_request: web.Request) -> web.Response:
        await asyncio.sleep(120)
        return web.json_response({})

    async def config_map(_request: web.Request) -> web.Response:
        return web.json_response({"kind": "ConfigMap", "metadata": {"name": "state"}})

    app = web.Application()
    app.router.add_post("/api/v1/namespaces/dm/events", hang)
    app.router.add_get("/api/v1/namespaces/dm/configmaps/state", config_map)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_hanging_events_neither_block_state_calls_nor_raise(hanging_events_api: str) -> None:
    configuration = client.Configuration(host=hanging_events_api)
    kube = Kube(client.ApiClient(configuration), threads=2)
    involved = {"kind": "Topic", "name": "orders", "namespace": "dm"}
    try:
        # More events than the state lane has threads: on a shared pool they would take them all.
        events = [asyncio.create_task(post_event(kube, "dm", involved, "LeaderChanged", f"leader {i}", "Normal"))
                  for i in range(4)]
        await asyncio.sleep(0.2)
        got = await kube.request("GET", "/api/v1/namespaces/dm/configmaps/state")
        assert got["metadata"]["name"] == "state"
        assert not all(event.done() for event in events), "the state call waited for the events"
        # Each event is dropped after the best-effort timeout, quietly.
        assert await asyncio.gather(*events) == [None] * 4
    finally:
        kube.close()
