"""One container of an emulated pod: starts it through container_init, runs its probes, restarts it
by the pod's restartPolicy with the kubelet's back-off, and stops it with SIGTERM, a grace period
and SIGKILL."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..container_init import ContainerSpec, Mount
from ..processes import die_with_parent
from .env import EnvError, container_env, expand, referenced_objects
from .images import ImageError, command_for
from .probes import Prober, run_probe
from .status import ContainerRecord, now_rfc3339
from .volumes import VolumeError

if TYPE_CHECKING:
    from .pod import PodWorker

log = logging.getLogger(__name__)
Obj = dict[str, Any]
BACKOFF_RESET_S = 600  # a container that ran this long starts its back-off over


class ContainerCannotStart(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class ContainerRunner:
    def __init__(self, worker: PodWorker, spec: Obj, init: bool) -> None:
        self.worker = worker
        self.spec = spec
        self.name = spec["name"]
        self.record = ContainerRecord(name=self.name, image=spec.get("image", ""), init=init)
        self.proc: asyncio.subprocess.Process | None = None
        self.log_path: Path | None = None
        self.previous_log: Path | None = None
        self.probe_tasks: list[asyncio.Task[None]] = []
        self._liveness_failed = asyncio.Event()
        self._stop_grace: float | None = None
        self._ready_probe_ok = False

    # -- what the kubelet reports --------------------------------------------------------------

    def _update(self, **changes: Any) -> None:
        for key, value in changes.items():
            setattr(self.record, key, value)
        self._refresh_ready()
        self.worker.mark_dirty()

    def _refresh_ready(self) -> None:
        running = self.record.state == "running" and self.record.started
        has_readiness = "readinessProbe" in self.spec
        self.record.ready = running and (self._ready_probe_ok if has_readiness else True)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.returncode is None else None

    # -- running ---------------------------------------------------------------------------------

    async def run_forever(self) -> None:
        """An app container: started, restarted by policy, until the pod stops."""
        policy = self.worker.restart_policy
        backoff = 0.0
        while not self.worker.stopping:
            try:
                ran_for, exit_code = await self._run_once()
            except ContainerCannotStart as exc:
                self._update(state="waiting", reason=exc.reason, message=exc.message)
                self.worker.event("Failed", exc.message, "Warning", self.name)
                backoff = self._next_backoff(backoff)
                if exc.reason == "ErrImagePull":
                    await self._sleep(1)
                    self._update(reason="ImagePullBackOff",
                                 message=f'Back-off pulling image "{self.record.image}"')
                await self._sleep(backoff)
                continue
            if self.worker.stopping:
                return
            if policy == "Never" or (policy == "OnFailure" and exit_code == 0):
                return
            if ran_for >= BACKOFF_RESET_S:
                backoff = 0.0
            if backoff > 0:
                message = f"back-off {backoff:g}s restarting failed container={self.name} pod={self.worker.name}"
                self._update(state="waiting", reason="CrashLoopBackOff", message=message)
                self.worker.event("BackOff", f"Back-off restarting failed container {self.name}", "Warning",
                                  self.name)
                await self._sleep(backoff)
            backoff = self._next_backoff(backoff)
            self.record.restart_count += 1

    async def run_to_completion(self) -> bool:
        """An init container: True once it exited 0; retried by policy otherwise."""
        backoff = 0.0
        while not self.worker.stopping:
            try:
                _, exit_code = await self._run_once()
            except ContainerCannotStart as exc:
                self._update(state="waiting", reason=exc.reason, message=exc.message)
                backoff = self._next_backoff(backoff)
                await self._sleep(backoff)
                continue
            if exit_code == 0:
                return True
            if self.worker.restart_policy == "Never" or self.worker.stopping:
                return False
            backoff = self._next_backoff(backoff)
            self._update(state="waiting", reason="CrashLoopBackOff",
                         message=f"back-off {backoff:g}s restarting failed init container {self.name}")
            await self._sleep(backoff)
            self.record.restart_count += 1
        return False

    def _next_backoff(self, current: float) -> float:
        s = self.worker.agent.settings
        return s.restart_backoff_s if current == 0 else min(current * 2, s.restart_backoff_max_s)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.worker.stop_event.wait(), seconds)

    async def _run_once(self) -> tuple[float, int]:
        spec_path = await self._prepare()
        instance = self.record.restart_count
        log_path = self.worker.log_dir / f"{self.name}.{instance}.log"
        self.previous_log, self.log_path = self.log_path, log_path
        with open(log_path, "ab") as out:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "dm_testbed.container_init", str(spec_path),
                stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
                preexec_fn=die_with_parent, env=self.worker.agent.init_env)
        started = time.monotonic()
        self._liveness_failed.clear()
        self._stop_grace = None
        self._ready_probe_ok = False
        has_startup = "startupProbe" in self.spec and not self.record.init
        self._update(state="running", reason=None, message=None, started_at=now_rfc3339(), finished_at=None,
                     exit_code=None, started=not has_startup,
                     container_id=f"dm-testbed://{self.worker.uid[:8]}-{self.name}-{instance}")
        self.worker.event("Started", f"Started container {self.name}", field=self.name)
        self._start_probes(has_startup)
        waiter = asyncio.create_task(self.proc.wait())
        liveness = asyncio.create_task(self._liveness_failed.wait())
        try:
            await asyncio.wait({waiter, liveness}, return_when=asyncio.FIRST_COMPLETED)
            if liveness.done() and not waiter.done():
                await self.stop(self.worker.grace_period, reason="liveness")
            returncode = await waiter
        finally:
            liveness.cancel()
            await self._stop_probes()
        exit_code = returncode if returncode >= 0 else 128 - returncode
        reason = "Completed" if exit_code == 0 else "Error"
        message = None
        if exit_code == 128 and log_path.exists():
            tail = log_path.read_text(errors="replace")[-500:]
            if "container_init:" in tail:
                reason, message = "StartError", tail.split("container_init:", 1)[1].strip()
        terminated = {"exitCode": exit_code, "reason": reason, "startedAt": self.record.started_at,
                      "finishedAt": now_rfc3339(), "containerID": self.record.container_id}
        if message:
            terminated["message"] = message
        self._update(state="terminated", reason=reason, message=message, exit_code=exit_code,
                     finished_at=terminated["finishedAt"], started=False, last_terminated=terminated)
        self.proc = None
        return time.monotonic() - started, exit_code

    async def _prepare(self) -> Path:
        worker = self.worker
        try:
            argv, runtime = command_for(self.spec.get("image", ""), self.spec.get("command"), self.spec.get("args"),
                                        worker.agent.runtimes)
        except ImageError as exc:
            raise ContainerCannotStart("ErrImagePull", str(exc)) from None
        cm_names, secret_names = referenced_objects(self.spec)
        ns = worker.namespace
        configmaps = {n: await worker.agent.kube.get_or_none(f"/api/v1/namespaces/{ns}/configmaps/{n}")
                      for n in cm_names}
        secrets = {n: await worker.agent.kube.get_or_none(f"/api/v1/namespaces/{ns}/secrets/{n}")
                   for n in secret_names}
        base = {"PATH": f"{runtime.bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "HOSTNAME": worker.hostname, "HOME": "/root"}
        try:
            env = container_env(worker.pod, self.spec, services=worker.agent.service_env(ns, worker.service_links),
                                configmaps=configmaps, secrets=secrets, node_allocatable=worker.node.allocatable,
                                base=base)
        except EnvError as exc:
            raise ContainerCannotStart("CreateContainerConfigError", str(exc)) from None
        argv = [argv[0], *[expand(a, env) for a in argv[1:]]]
        try:
            mounts = self._mounts()
        except VolumeError as exc:
            raise ContainerCannotStart("CreateContainerConfigError", str(exc)) from None
        security = self.spec.get("securityContext") or {}
        spec = ContainerSpec(netns=worker.netns_path, hostname=worker.hostname, mounts=mounts,
                             read_only_root=bool(security.get("readOnlyRootFilesystem")),
                             keep_visible=[str(p) for p in worker.agent.host_roots(runtime)],
                             workdir=self.spec.get("workingDir"), argv=argv, env=env)
        path = worker.dir / "containers" / f"{self.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(spec.model_dump_json())
        return path

    def _mounts(self) -> list[Mount]:
        worker = self.worker
        tmp = worker.dir / "containers" / self.name / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        tmp.chmod(0o1777)
        mounts = [Mount(source=str(tmp), target="/tmp"),
                  Mount(source=str(worker.dir / "etc" / "hosts"), target="/etc/hosts"),
                  Mount(source=str(worker.dir / "etc" / "resolv.conf"), target="/etc/resolv.conf"),
                  Mount(source=str(worker.dir / "etc" / "hostname"), target="/etc/hostname")]
        for vm in self.spec.get("volumeMounts", []):
            source = worker.volume_paths.get(vm["name"])
            if source is None:
                raise VolumeError(f'volumeMount "{vm["name"]}": no such volume in the pod')
            if vm.get("subPath"):
                source = source / vm["subPath"]
                if not source.exists():
                    source.mkdir(parents=True)
            target = vm["mountPath"]
            worker.agent.mountpoints.ensure(target, is_file=source.is_file())
            mounts.append(Mount(source=str(source), target=target, read_only=bool(vm.get("readOnly"))))
        return mounts

    # -- probes ------------------------------------------------------------------------------------

    def _start_probes(self, has_startup: bool) -> None:
        if self.record.init:
            return
        ip = self.worker.ip or ""
        if has_startup:
            self.probe_tasks.append(asyncio.create_task(
                Prober(self.spec["startupProbe"], self.spec, ip, lambda: self.pid, self._on_startup, False).run()))
        else:
            self._start_running_probes()

    def _start_running_probes(self) -> None:
        ip = self.worker.ip or ""
        if "readinessProbe" in self.spec:
            self.probe_tasks.append(asyncio.create_task(
                Prober(self.spec["readinessProbe"], self.spec, ip, lambda: self.pid, self._on_readiness,
                       False).run()))
        if "livenessProbe" in self.spec:
            self.probe_tasks.append(asyncio.create_task(
                Prober(self.spec["livenessProbe"], self.spec, ip, lambda: self.pid, self._on_liveness, True).run()))

    def _on_startup(self, ok: bool, message: str) -> None:
        if ok:
            self._update(started=True)
            self._start_running_probes()
        else:
            self.worker.event("Unhealthy", f"Startup probe failed: {message}", "Warning", self.name)
            self._liveness_failed.set()

    def _on_readiness(self, ok: bool, message: str) -> None:
        self._ready_probe_ok = ok
        if not ok:
            self.worker.event("Unhealthy", f"Readiness probe failed: {message}", "Warning", self.name)
        self._update()

    def _on_liveness(self, ok: bool, message: str) -> None:
        if not ok:
            self.worker.event("Unhealthy", f"Liveness probe failed: {message}", "Warning", self.name)
            self.worker.event("Killing", f"Container {self.name} failed liveness probe, will be restarted",
                              field=self.name)
            self._liveness_failed.set()

    async def _stop_probes(self) -> None:
        tasks, self.probe_tasks = self.probe_tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- stopping ----------------------------------------------------------------------------------

    async def stop(self, grace_s: float, reason: str = "deleted") -> None:
        """preStop hook, SIGTERM, `grace_s` for both together, then SIGKILL (the whole process group)."""
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        deadline = time.monotonic() + grace_s
        hook = (self.spec.get("lifecycle") or {}).get("preStop")
        if hook and grace_s > 0:
            probe = {**hook, "timeoutSeconds": max(grace_s, 0.1)}
            with contextlib.suppress(Exception):
                await asyncio.wait_for(run_probe(probe, self.spec, self.worker.ip or "", self.pid), grace_s)
        self._signal(proc, signal.SIGTERM)
        remaining = max(deadline - time.monotonic(), 0)
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), remaining)
        except TimeoutError:
            self._signal(proc, signal.SIGKILL)
            await proc.wait()

    def kill_now(self, sig: int = signal.SIGKILL) -> bool:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return False
        self._signal(proc, sig)
        return True

    @staticmethod
    def _signal(proc: asyncio.subprocess.Process, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
