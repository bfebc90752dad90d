"""The operator process's state: the watch cache, one ClusterRuntime per DMCluster it serves (each with
its controller, started from the resources' status), and the HTTP server brokers reach their
controller through (`/clusters/<namespace>/<name>/v1/...`), with /healthz, /readyz and /metrics."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from dm_broker.controller.controller import Controller
from dm_broker.controller.http import add_controller_routes, controller_application
from dm_broker.gc_tuning import LongLivedObjects
from dm_broker.tasks import stop_tasks
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .cache import ObjectCache
from .controller_tls import ControllerTls
from .crds import CrdVersions
from .kube import Kube
from .metrics import CLUSTERS, REGISTRY
from .runtime import ClusterRuntime
from .settings import OperatorSettings

log = logging.getLogger(__name__)
Key = tuple[str, str]
CLUSTER_LANE_THREADS = 4  # each DMCluster's API calls run on a lane of their own
RELEASE_AFTER_S = 1.0  # a stopped cluster's objects go to one full collection this long after it stopped


class Operator:
    def __init__(self, settings: OperatorSettings, kube: Kube, cache: ObjectCache | None = None) -> None:
        self.settings = settings
        self.kube = kube
        self.cache = cache or ObjectCache(kube)
        self.crd_versions = CrdVersions()
        self.runtimes: dict[Key, ClusterRuntime] = {}
        self._starting: dict[Key, tuple[str, asyncio.Task[None]]] = {}
        self._retiring: set[asyncio.Task[None]] = set()
        self.controller_tls = ControllerTls()
        # The clusters' partitions are this process's long-lived objects (frozen as they grow, ADR 0040)
        self.long_lived = LongLivedObjects(0)
        self.role = "starting"  # "standby" while another instance leads; "leader" once it hosts controllers
        self.kopf_ready = False

    def partition_count(self) -> int:
        """The partitions of every cluster this operator runs the controller of: the long-lived objects that
        grow with the clusters (what freeze_as_it_grows watches)."""
        return sum(runtime.controller.partition_count() for runtime in self.runtimes.values())

    # -- DMClusters --------------------------------------------------------------------------------

    def ensure(self, namespace: str, name: str, uid: str) -> None:
        """The DMCluster exists: its runtime runs (or is starting), for this uid."""
        key = (namespace, name)
        runtime = self.runtimes.get(key)
        if runtime is not None and runtime.uid != uid:
            log.info("%s/%s: a new DMCluster of the same name", namespace, name)
            self._retire(self.runtimes.pop(key))
            runtime = None
        if runtime is not None:
            runtime.wake.set()
            return
        starting = self._starting.get(key)
        if starting is not None:
            if starting[0] == uid:
                return
            starting[1].cancel()
        self._starting[key] = (uid, asyncio.create_task(self._open(namespace, name, uid),
                                                        name=f"open-{namespace}-{name}"))

    async def _open(self, namespace: str, name: str, uid: str) -> None:
        backoff = 1.0
        while True:
            lane = self.kube.lane(CLUSTER_LANE_THREADS)
            try:
                runtime = await ClusterRuntime.open(lane, self.cache, self.settings, namespace, name, uid,
                                                    self.crd_versions, self.controller_tls)
                break
            except asyncio.CancelledError:
                lane.close()
                raise
            except Exception as exc:
                lane.close()
                log.warning("%s/%s: cannot start the cluster's controller yet (retrying in %.0fs): %s", namespace,
                            name, backoff, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
        self._starting.pop((namespace, name), None)
        self.runtimes[(namespace, name)] = runtime
        CLUSTERS.set(len(self.runtimes))
        runtime.start()

    def wake(self, namespace: str, name: str) -> bool:
        """Wakes the cluster's runtime; False when this operator does not run (nor start) that cluster."""
        runtime = self.runtimes.get((namespace, name))
        if runtime is not None:
            runtime.wake.set()
            return True
        return (namespace, name) in self._starting

    def _retire(self, runtime: ClusterRuntime) -> None:
        CLUSTERS.set(len(self.runtimes))
        task = asyncio.create_task(self._stop(runtime))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _stop(self, runtime: ClusterRuntime) -> None:
        await runtime.stop()
        runtime.kube.close()
        # Once the callers' frames have let go of it too: the stopped cluster's objects may hold cycles, and
        # frozen they would never be freed (gc_tuning.LongLivedObjects.release).
        asyncio.get_running_loop().call_later(RELEASE_AFTER_S, self.long_lived.release)

    async def remove(self, namespace: str, name: str) -> None:
        starting = self._starting.pop((namespace, name), None)
        if starting is not None:
            await stop_tasks(starting[1])
        runtime = self.runtimes.pop((namespace, name), None)
        self.controller_tls.remove(namespace, name)
        CLUSTERS.set(len(self.runtimes))
        if runtime is not None:
            log.info("%s/%s: DMCluster deleted; its controller stops", namespace, name)
            await self._stop(runtime)

    def runtime(self, namespace: str, name: str) -> ClusterRuntime | None:
        return self.runtimes.get((namespace, name))

    async def close(self) -> None:
        await stop_tasks(*(task for _, task in self._starting.values()))
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)
        self._starting.clear()
        for runtime in list(self.runtimes.values()):
            await self._stop(runtime)
        self.runtimes.clear()
        CLUSTERS.set(0)

    # -- HTTP --------------------------------------------------------------------------------------

    def _controller_of(self, request: web.Request) -> Controller | None:
        runtime = self.runtimes.get((request.match_info["ns"], request.match_info["cluster"]))
        return runtime.controller if runtime else None

    def _token_of(self, request: web.Request) -> str:
        runtime = self.runtimes.get((request.match_info["ns"], request.match_info["cluster"]))
        # A cluster whose controller is not running here accepts no one.
        return runtime.token if runtime and runtime.token else "\0not-ready"

    @property
    def serving(self) -> bool:
        """Doing its job: standing by, or leading with its watches running."""
        return self.role == "standby" or (self.role == "leader" and self.kopf_ready)

    def app(self) -> web.Application:
        async def healthz(_: web.Request) -> web.Response:
            # Liveness: this answers while the event loop runs; a leader whose watches never start is not.
            alive = self.role != "leader" or self.kopf_ready
            body = {"status": "ok" if alive else "starting", "role": self.role, "clusters": len(self.runtimes)}
            return web.json_response(body, status=200 if alive else 503)

        async def readyz(_: web.Request) -> web.Response:
            # Readiness: a standby is Ready (a rollout waits for it); brokers reach the leader through
            # the Service, which selects the leader's pod by its label.
            body = {"status": "ready" if self.serving else "starting", "role": self.role}
            return web.json_response(body, status=200 if self.serving else 503)

        async def metrics(_: web.Request) -> web.Response:
            return web.Response(body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})

        app = controller_application()
        add_controller_routes(app, "/clusters/{ns}/{cluster}", self._controller_of, self._token_of)
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/readyz", readyz)
        app.router.add_get("/metrics", metrics)
        return app
