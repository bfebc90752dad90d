"""HTTP side port: liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

if TYPE_CHECKING:
    from ..broker import Broker


def make_app(broker: Broker) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "node_id": broker.node_id})

    async def readyz(_: web.Request) -> web.Response:
        if broker.ready:
            return web.json_response({"status": "ready", "partitions": len(broker.partitions)})
        return web.json_response({"status": "recovering"}, status=503)

    async def metrics(_: web.Request) -> web.Response:
        body = await broker.metrics.exposition()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app
