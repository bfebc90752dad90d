"""HTTP side port: liveness, readiness and Prometheus metrics.

/metrics names every topic and group of the cluster, so where the REST listeners ask who is calling
(http.authentication.method=BASIC) it asks too, with the same users, and under an authorizer it needs
DESCRIBE on the cluster (issue 65). `http.metrics.authentication.enable=false` leaves it open for a scraper
that a NetworkPolicy admits. The probes stay open: the kubelet asks them without credentials."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from ..security.acls import CLUSTER_NAME, Operation, ResourceType
from ..security.listeners import Listener
from .rest.auth import REALM, HttpAuthenticator
from .rest.errors import RestError, error_response
from .rest.server import http_listeners

if TYPE_CHECKING:
    from ..broker import Broker


def metrics_authenticator(broker: Broker) -> HttpAuthenticator | None:
    """Who may read /metrics: the users of the first REST listener (None: anyone)."""
    config = broker.config
    if config["http.authentication.method"] != "BASIC" or not config["http.metrics.authentication.enable"]:
        return None
    listeners = http_listeners(config)
    listener = listeners[0] if listeners else Listener(name="HTTP", host="", port=0, security_protocol="PLAINTEXT",
                                                       advertised_host="", advertised_port=0)
    return HttpAuthenticator(broker, listener)


def make_app(broker: Broker) -> web.Application:
    guard = metrics_authenticator(broker)

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "node_id": broker.node_id})

    async def readyz(_: web.Request) -> web.Response:
        if broker.ready:
            return web.json_response({"status": "ready", "partitions": len(broker.partitions)})
        return web.json_response({"status": "recovering"}, status=503)

    async def metrics(request: web.Request) -> web.Response:
        if guard is not None:
            try:
                session = await guard.session(request)
            except RestError as exc:
                return error_response(exc.status, exc.error_code, exc.message, {"WWW-Authenticate": REALM})
            if not broker.security.allowed(session, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
                return error_response(403, 40301, "DESCRIBE on the cluster is needed for /metrics")
        body = await broker.metrics.exposition()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app
