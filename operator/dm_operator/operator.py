"""The operator process's state: one ClusterRuntime per DMCluster it serves, and the HTTP server
brokers reach their controller through (`/clusters/<namespace>/<name>/v1/...`), with /healthz and
/metrics."""

from __future__ import annotations

import asyncio
import logging
import time

from aiohttp import web
from dm_broker.controller.controller import Controller
from dm_broker.controller.http import add_controller_routes
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .kube import Kube
from .metrics import CLUSTERS, REGISTRY
from .runtime import ClusterRuntime
from .settings import OperatorSettings

log = logging.getLogger(__name__)


class Operator:
    def __init__(self, settings: OperatorSettings, kube: Kube | None = None) -> None:
        self.settings = settings
        self.kube = kube or Kube()
        self.runtimes: dict[tuple[str, str], ClusterRuntime] = {}
        self.kopf_ready = False
        self.last_api_ok = time.monotonic()

    # -- DMClusters --------------------------------------------------------------------------------

    def ensure(self, namespace: str, name: str, uid: str) -> ClusterRuntime:
        runtime = self.runtimes.get((namespace, name))
        if runtime is not None and runtime.uid != uid:
            log.info("%s/%s: a new DMCluster of the same name", namespace, name)
            self._forget(runtime)
            runtime = None
        if runtime is None:
            runtime = ClusterRuntime(self, namespace, name, uid)
            self.runtimes[(namespace, name)] = runtime
            runtime.start()
            CLUSTERS.set(len(self.runtimes))
        runtime.wake.set()
        return runtime

    def _forget(self, runtime: ClusterRuntime) -> None:
        self.runtimes.pop(runtime.key, None)
        CLUSTERS.set(len(self.runtimes))
        task = asyncio.create_task(runtime.stop())
        runtime._events.add(task)

    async def remove(self, namespace: str, name: str) -> None:
        runtime = self.runtimes.pop((namespace, name), None)
        CLUSTERS.set(len(self.runtimes))
        if runtime is not None:
            log.info("%s/%s: DMCluster deleted; its controller stops", namespace, name)
            await runtime.stop()

    def runtime(self, namespace: str, name: str) -> ClusterRuntime | None:
        return self.runtimes.get((namespace, name))

    async def close(self) -> None:
        for runtime in list(self.runtimes.values()):
            await runtime.stop()
        self.runtimes.clear()
        self.kube.close()

    # -- HTTP --------------------------------------------------------------------------------------

    def _controller_of(self, request: web.Request) -> Controller | None:
        runtime = self.runtimes.get((request.match_info["ns"], request.match_info["cluster"]))
        return runtime.controller if runtime else None

    def _token_of(self, request: web.Request) -> str:
        runtime = self.runtimes.get((request.match_info["ns"], request.match_info["cluster"]))
        # A cluster whose token is not loaded yet accepts no one.
        return runtime.token if runtime and runtime.token else "\0not-ready"

    def app(self) -> web.Application:
        async def healthz(_: web.Request) -> web.Response:
            ok = self.kopf_ready
            body = {"status": "ok" if ok else "starting", "clusters": len(self.runtimes)}
            return web.json_response(body, status=200 if ok else 503)

        async def metrics(_: web.Request) -> web.Response:
            return web.Response(body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})

        app = web.Application()
        add_controller_routes(app, "/clusters/{ns}/{cluster}", self._controller_of, self._token_of)
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/metrics", metrics)
        return app
