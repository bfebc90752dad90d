"""One pod on an emulated node: its sandbox (network namespace, address, /etc files), volumes,
init and app containers, status reporting, and termination as the kubelet does it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import network
from ..kube import ApiError
from .container import ContainerRunner
from .status import PodView, now_rfc3339, pod_status
from .volumes import PodVolumes, VolumeError, VolumePending

if TYPE_CHECKING:
    from .agent import EmulatedNode, NodeAgent

log = logging.getLogger(__name__)
Obj = dict[str, Any]
MIN_GRACE_S = 2  # the kubelet's floor for a pod removed from the API without a grace period
VOLUME_REFRESH_S = 15


class PodWorker:
    def __init__(self, agent: NodeAgent, node: EmulatedNode, pod: Obj, restart_counts: dict[str, int]) -> None:
        self.agent = agent
        self.node = node
        self.pod = pod
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.name: str = meta["name"]
        self.namespace: str = meta["namespace"]
        spec = pod["spec"]
        self.restart_policy: str = spec.get("restartPolicy", "Always")
        self.service_links: bool = spec.get("enableServiceLinks", True)
        self.hostname: str = spec.get("hostname") or self.name
        self.dir: Path = agent.settings.run_dir / "pods" / self.uid
        self.log_dir: Path = agent.settings.run_dir / "logs" / "pods" / f"{self.namespace}_{self.name}_{self.uid}"
        self.ip: str | None = None
        self.netns: str | None = None
        self.volume_paths: dict[str, Path] = {}
        self.init = [ContainerRunner(self, c, init=True) for c in spec.get("initContainers", [])]
        self.containers = [ContainerRunner(self, c, init=False) for c in spec["containers"]]
        for runner in self.init + self.containers:
            runner.record.restart_count = restart_counts.get(runner.name, 0)
        self.start_time = now_rfc3339()
        self.stop_event = asyncio.Event()
        self.grace_period: float = float(spec.get("terminationGracePeriodSeconds", 30))
        self.api_gone = False
        self.pod_message: str | None = None
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.finished = asyncio.Event()
        self.frozen = False  # the node went down: no more status reports, no API deletes
        self.reaper: asyncio.Task[None] | None = None  # the agent's task that forgets this worker

    # -- properties ------------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self.stop_event.is_set()

    @property
    def netns_path(self) -> str:
        assert self.netns is not None
        return network.netns_path(self.netns)

    def runner(self, name: str) -> ContainerRunner | None:
        return next((r for r in self.init + self.containers if r.name == name), None)

    def event(self, reason: str, message: str, kind: str = "Normal", field: str | None = None) -> None:
        if not self.frozen:
            self.agent.events.record(self.pod, self.node.name, reason, message, kind,
                                     f"spec.containers{{{field}}}" if field else None)

    def mark_dirty(self) -> None:
        self._dirty.set()

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run()), asyncio.create_task(self._report_status())]

    def update(self, pod: Obj) -> None:
        """A newer version of the pod object; a deletion timestamp starts graceful termination."""
        self.pod = pod
        meta = pod["metadata"]
        if meta.get("deletionTimestamp") and not self.stopping:
            grace = meta.get("deletionGracePeriodSeconds")
            self.request_stop(float(grace) if grace is not None else self.grace_period)

    def request_stop(self, grace_s: float, api_gone: bool = False) -> None:
        self.api_gone = self.api_gone or api_gone
        if not self.stopping:
            self.grace_period = max(grace_s, 0)
            self.stop_event.set()

    async def _run(self) -> None:
        try:
            await self._start_sandbox()
            if not self.stopping:
                await self._prepare_volumes()
            ok = True
            for runner in self.init:
                if self.stopping:
                    break
                ok = await runner.run_to_completion()
                if not ok:
                    break
            if ok and not self.stopping:
                self._tasks += [asyncio.create_task(r.run_forever()) for r in self.containers]
                self._tasks.append(asyncio.create_task(self._refresh_volumes()))
            await self.stop_event.wait()
            await self._terminate()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("pod %s/%s failed in the node agent", self.namespace, self.name)
            await self._terminate()
        finally:
            self.finished.set()

    async def _start_sandbox(self) -> None:
        self.ip = self.node.pool.take()
        self.netns = await network.create_pod_network(self.agent.settings, self.uid, self.ip)
        etc = self.dir / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        s = self.agent.settings
        domain = s.cluster_domain
        names = self.hostname
        subdomain = self.pod["spec"].get("subdomain")
        if subdomain:
            names = f"{self.hostname}.{subdomain}.{self.namespace}.svc.{domain} {self.hostname}"
        (etc / "hosts").write_text(
            "# Kubernetes-managed hosts file (dm testbed).\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost "
            f"ip6-loopback\n{self.ip}\t{names}\n")
        (etc / "resolv.conf").write_text(
            f"nameserver {s.gateway_ip}\nsearch {self.namespace}.svc.{domain} svc.{domain} {domain}\n"
            "options ndots:5\n")
        (etc / "hostname").write_text(self.hostname + "\n")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.mark_dirty()

    async def _prepare_volumes(self) -> None:
        self.volumes = PodVolumes(self.agent.kube, self.pod, self.dir, self.node.allocatable)
        while not self.stopping:
            try:
                self.volume_paths = await self.volumes.prepare()
                self.pod_message = None
                self.mark_dirty()
                return
            except VolumePending as exc:
                self._all_waiting("ContainerCreating", str(exc))
                delay = 0.5
            except (VolumeError, ApiError) as exc:
                self._all_waiting("CreateContainerConfigError", str(exc))
                self.event("FailedMount", str(exc), "Warning")
                delay = 5
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop_event.wait(), delay)

    def _all_waiting(self, reason: str, message: str) -> None:
        for runner in self.init + self.containers:
            runner.record.reason, runner.record.message = reason, message
        self.mark_dirty()

    async def _refresh_volumes(self) -> None:
        while True:
            await asyncio.sleep(VOLUME_REFRESH_S)
            self.volumes.pod = self.pod
            await self.volumes.refresh()

    async def _terminate(self) -> None:
        grace = self.grace_period if not self.api_gone else max(self.grace_period, MIN_GRACE_S)
        running = [r for r in self.init + self.containers if r.pid is not None]
        for runner in running:
            self.event("Killing", f"Stopping container {runner.name}", field=runner.name)
        await asyncio.gather(*(r.stop(grace) for r in running), return_exceptions=True)
        for task in self._tasks[2:]:
            task.cancel()
        for task in self._tasks[2:]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._teardown_sandbox()
        if not self.api_gone and not self.frozen:
            # The kubelet's final delete: the object goes once everything has stopped.
            body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                    "preconditions": {"uid": self.uid}}
            with contextlib.suppress(ApiError, OSError):
                await self.agent.kube.delete(f"/api/v1/namespaces/{self.namespace}/pods/{self.name}", body)
        # Nothing more to report: left waiting, the status task would be collected with this
        # worker while pending (asyncio logs "Task was destroyed but it is pending!").
        self._tasks[1].cancel()

    async def _teardown_sandbox(self) -> None:
        from ..processes import kill_and_wait

        if self.netns is not None:
            # Anything a container left behind in the pod's namespace (own sessions included).
            kill_and_wait(network.netns_pids(self.netns))
            await network.delete_pod_network(self.agent.settings, self.uid)
        if self.ip is not None:
            self.node.pool.give_back(self.ip)
        shutil.rmtree(self.dir, ignore_errors=True)

    def freeze(self) -> None:
        """The node lost power: every process dies at once, nothing more is reported."""
        self.frozen = True
        for runner in self.init + self.containers:
            runner.kill_now(signal.SIGKILL)
        self.api_gone = True
        self.request_stop(0)

    async def wait_finished(self) -> None:
        await self.finished.wait()
        for task in self._tasks:
            task.cancel()

    # -- status ----------------------------------------------------------------------------------

    def status(self) -> Obj:
        view = PodView(self.restart_policy, [r.record for r in self.init], [r.record for r in self.containers])
        return pod_status(self.pod, view, pod_ip=self.ip, host_ip=self.agent.settings.gateway_ip,
                          start_time=self.start_time, message=self.pod_message)

    async def _report_status(self) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/pods/{self.name}/status"
        while not self.frozen:
            await self._dirty.wait()
            self._dirty.clear()
            if self.frozen or self.api_gone:
                return
            body = {"metadata": {"uid": self.uid}, "status": self.status()}
            try:
                updated = await self.agent.kube.patch(path, body)
                self.pod = {**self.pod, "status": updated.get("status", {})}
            except ApiError as exc:
                if exc.status in (404, 409):
                    return  # gone, or replaced by a pod of the same name
                log.warning("status of %s/%s: %s", self.namespace, self.name, exc)
                await asyncio.sleep(0.5)
                self._dirty.set()
            except (OSError, TimeoutError) as exc:
                log.debug("status of %s/%s: %s", self.namespace, self.name, exc)
                await asyncio.sleep(0.5)
                self._dirty.set()
