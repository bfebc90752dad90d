"""The node agent: registers the emulated nodes (labels, zones, capacity, leases), runs the pods the
scheduler binds to them, and feeds Services/Endpoints to the DNS server and the service proxy."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..dns import dns_records
from ..kube import ApiError, Informer, Kube
from ..network import IpPool
from ..settings import K8S_VERSION, TestbedSettings
from .env import service_env
from .events import EventRecorder
from .images import ImageRuntime, default_runtimes
from .pod import PodWorker
from .status import now_rfc3339

log = logging.getLogger(__name__)
Obj = dict[str, Any]
LEASE_RENEW_S = 5
NODE_STATUS_S = 30


@dataclass
class EmulatedNode:
    index: int
    name: str
    zone: str
    pool: IpPool
    allocatable: dict[str, str]
    up: bool = True


class MountPoints:
    """Mount targets that did not exist on this machine are created (the pod's mount namespace is a
    view of the host's file system) and removed again at teardown; the list survives in a file so a
    stale run's are removed too."""

    def __init__(self, record: Path) -> None:
        self.record = record
        self.created: list[str] = record.read_text().split("\n") if record.exists() else []

    def ensure(self, target: str, is_file: bool) -> None:
        path = Path(target)
        if path.exists():
            return
        missing = path
        while not missing.parent.exists():
            missing = missing.parent
        if is_file:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        else:
            path.mkdir(parents=True, exist_ok=True)
        self.created.append(str(missing))
        self.record.write_text("\n".join(self.created))

    def remove_all(self) -> None:
        for top in reversed(self.created):
            remove_empty_tree(Path(top))
        self.created = []
        with contextlib.suppress(FileNotFoundError):
            self.record.unlink()


def remove_empty_tree(top: Path) -> None:
    """Removes `top` if it holds nothing but empty directories and empty files (mount points)."""
    if not top.exists():
        return
    if top.is_file():
        if top.stat().st_size == 0:
            top.unlink()
        return
    for dirpath, _dirnames, filenames in os.walk(top, topdown=False):
        for f in filenames:
            p = Path(dirpath) / f
            if p.stat().st_size == 0:
                p.unlink()
        with contextlib.suppress(OSError):
            Path(dirpath).rmdir()


class NodeAgent:
    def __init__(self, settings: TestbedSettings, kube: Kube, on_dns: Any, on_services: Any,
                 runtimes: dict[str, ImageRuntime] | None = None) -> None:
        self.settings = settings
        self.kube = kube
        self.runtimes = runtimes or default_runtimes()
        self.events = EventRecorder(kube)
        self.mountpoints = MountPoints(settings.run_dir / "mountpoints.txt")
        allocatable = {"cpu": settings.node_cpu, "memory": settings.node_memory, "pods": str(settings.node_pods),
                       "ephemeral-storage": "100Gi"}
        self.nodes = {settings.node_name(i): EmulatedNode(i, settings.node_name(i), settings.node_zone(i),
                                                          IpPool(settings.node_pod_cidr(i)), dict(allocatable))
                      for i in range(settings.nodes)}
        self.workers: dict[str, PodWorker] = {}
        self._on_dns = on_dns
        self._on_services = on_services
        self.pods = Informer(kube, "/api/v1/pods", self._pod_event)
        self.services = Informer(kube, "/api/v1/services", self._network_event)
        self.endpoints = Informer(kube, "/api/v1/endpoints", self._network_event)
        self._tasks: list[asyncio.Task[None]] = []
        self._network_dirty = asyncio.Event()
        testbed_root = str(Path(__file__).resolve().parents[2])
        # container_init runs with the testbed on its path, and nothing else of the agent's environment.
        self.init_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": testbed_root}

    def host_roots(self, runtime: ImageRuntime) -> list[Path]:
        """Directories of this machine an image's programs need (its virtualenv's project, this
        testbed's code) that live below /tmp, where a pod's private /tmp would hide them."""
        roots = {runtime.bin_dir.resolve().parents[1], Path(self.init_env["PYTHONPATH"])}
        return sorted(r for r in roots if r.is_relative_to("/tmp"))

    # -- start and stop --------------------------------------------------------------------------

    async def start(self) -> None:
        for node in self.nodes.values():
            await self._register(node)
        self._tasks = [asyncio.create_task(self.pods.run()), asyncio.create_task(self.services.run()),
                       asyncio.create_task(self.endpoints.run()), asyncio.create_task(self._heartbeats()),
                       asyncio.create_task(self._network_sync())]
        await asyncio.gather(self.pods.synced.wait(), self.services.synced.wait(), self.endpoints.synced.wait())

    async def stop(self) -> None:
        """Testbed shutdown: every pod process is killed at once, every sandbox removed."""
        for task in self._tasks:
            task.cancel()
        for worker in list(self.workers.values()):
            worker.freeze()
        await asyncio.gather(*(w.wait_finished() for w in self.workers.values()), return_exceptions=True)
        self.workers.clear()
        self.mountpoints.remove_all()

    # -- nodes -----------------------------------------------------------------------------------

    def _node_object(self, node: EmulatedNode) -> Obj:
        return {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node.name, "labels": {
                "kubernetes.io/hostname": node.name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
                "topology.kubernetes.io/zone": node.zone, "topology.kubernetes.io/region": "dm-testbed",
                "failure-domain.beta.kubernetes.io/zone": node.zone,
                "node.kubernetes.io/instance-type": "dm-testbed-process",
            }},
            "spec": {"podCIDR": str(self.settings.node_pod_cidr(node.index))},
        }

    def _node_status(self, node: EmulatedNode) -> Obj:
        stamp = now_rfc3339()

        def cond(kind: str, status: str, reason: str, message: str) -> Obj:
            return {"type": kind, "status": status, "reason": reason, "message": message,
                    "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}

        return {
            "capacity": node.allocatable, "allocatable": node.allocatable,
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("Ready", "True", "KubeletReady", "dm testbed node agent is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": self.settings.gateway_ip},
                          {"type": "Hostname", "address": node.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.settings.kubelet_port + node.index}},
            "nodeInfo": {"machineID": node.name, "systemUUID": node.name, "bootID": node.name,
                         "kernelVersion": os.uname().release, "osImage": "dm testbed (processes)",
                         "containerRuntimeVersion": "dm-testbed://1", "kubeletVersion": K8S_VERSION,
                         "kubeProxyVersion": K8S_VERSION, "operatingSystem": "linux", "architecture": "amd64"},
        }

    async def _register(self, node: EmulatedNode) -> None:
        await self.kube.create_or_get("/api/v1/nodes", self._node_object(node))
        await self._post_node_status(node)
        await self._renew_lease(node)

    async def _post_node_status(self, node: EmulatedNode) -> None:
        current = await self.kube.get(f"/api/v1/nodes/{node.name}")
        status = self._node_status(node)
        # Keep transition times of conditions that did not change.
        old = {c["type"]: c for c in current.get("status", {}).get("conditions", [])}
        for c in status["conditions"]:
            if old.get(c["type"], {}).get("status") == c["status"]:
                c["lastTransitionTime"] = old[c["type"]]["lastTransitionTime"]
        await self.kube.patch(f"/api/v1/nodes/{node.name}/status", {"status": status})

    async def _renew_lease(self, node: EmulatedNode) -> None:
        micro = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": node.name, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": node.name, "leaseDurationSeconds": 40, "renewTime": micro}}
        try:
            await self.kube.patch(f"{path}/{node.name}", {"spec": body["spec"]})
        except ApiError as exc:
            if exc.status != 404:
                raise
            await self.kube.create(path, body)

    async def _heartbeats(self) -> None:
        ticks = 0
        while True:
            await asyncio.sleep(LEASE_RENEW_S)
            ticks += 1
            for node in self.nodes.values():
                if not node.up:
                    continue
                try:
                    await self._renew_lease(node)
                    if ticks % (NODE_STATUS_S // LEASE_RENEW_S) == 0:
                        await self._post_node_status(node)
                except (ApiError, OSError, TimeoutError) as exc:
                    log.warning("heartbeat of %s: %s", node.name, exc)

    async def set_node_up(self, name: str, up: bool) -> None:
        """Chaos: a node loses power (its pods' processes die, its lease stops, the node controller
        marks it NotReady) or comes back (Ready again, its pods restarted)."""
        node = self.nodes[name]
        if node.up == up:
            return
        node.up = up
        if not up:
            victims = [w for w in self.workers.values() if w.node is node]
            for worker in victims:
                worker.freeze()
            await asyncio.gather(*(w.wait_finished() for w in victims), return_exceptions=True)
            for worker in victims:
                self.workers.pop(worker.uid, None)
            return
        await self._post_node_status(node)
        await self._renew_lease(node)
        for pod in list(self.pods.cache.values()):
            if pod["spec"].get("nodeName") == name:
                await self._pod_event("MODIFIED", pod)

    # -- pods ------------------------------------------------------------------------------------

    async def _pod_event(self, kind: str, pod: Obj) -> None:
        self._network_dirty.set()  # pod addresses feed DNS
        node = self.nodes.get(pod.get("spec", {}).get("nodeName", ""))
        if node is None or not node.up:
            return
        uid = pod["metadata"]["uid"]
        worker = self.workers.get(uid)
        if kind == "DELETED":
            if worker is not None:
                worker.request_stop(0, api_gone=True)
            return
        if worker is not None:
            worker.update(pod)
            return
        phase = pod.get("status", {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            return
        if pod["metadata"].get("deletionTimestamp"):
            # Deleted before it ever ran here: nothing to stop, only the final delete.
            body = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
            with contextlib.suppress(ApiError, OSError):
                await self.kube.delete(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/"
                                       f"{pod['metadata']['name']}", body)
            return
        counts = {c["name"]: c.get("restartCount", 0) + (1 if c.get("state", {}).get("running") or
                                                          c.get("state", {}).get("terminated") else 0)
                  for c in pod.get("status", {}).get("containerStatuses", [])}
        worker = PodWorker(self, node, pod, counts)
        self.workers[uid] = worker
        worker.start()
        worker.reaper = asyncio.create_task(self._forget_when_done(worker))

    async def _forget_when_done(self, worker: PodWorker) -> None:
        await worker.finished.wait()
        if self.workers.get(worker.uid) is worker:
            del self.workers[worker.uid]

    def find(self, namespace: str, name: str) -> PodWorker | None:
        for worker in self.workers.values():
            if worker.namespace == namespace and worker.name == name and not worker.stopping:
                return worker
        return next((w for w in self.workers.values() if w.namespace == namespace and w.name == name), None)

    # -- services --------------------------------------------------------------------------------

    def service_env(self, namespace: str, links: bool) -> dict[str, str]:
        services = [s for (ns, _), s in self.services.cache.items() if ns == namespace] if links else []
        master = self.services.cache.get(("default", "kubernetes"))
        if namespace == "default" and links:
            services = [s for s in services if s["metadata"]["name"] != "kubernetes"]
        return service_env(services, master)

    async def _network_event(self, kind: str, obj: Obj) -> None:
        self._network_dirty.set()

    async def _network_sync(self) -> None:
        while True:
            await self._network_dirty.wait()
            self._network_dirty.clear()
            services = list(self.services.cache.values())
            endpoints = list(self.endpoints.cache.values())
            pods = [p for p in self.pods.cache.values() if p.get("status", {}).get("podIP")]
            self._on_dns(dns_records(services, endpoints, pods, self.settings.cluster_domain))
            try:
                await self._on_services(services, endpoints)
            except Exception:
                log.exception("service proxy sync failed")
            await asyncio.sleep(0.05)
