"""Pod status as the kubelet reports it, computed from the containers' records (pure)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ContainerRecord:
    """What the kubelet knows of one container (its current instance and the previous one)."""

    name: str
    image: str
    init: bool = False
    state: str = "waiting"  # waiting | running | terminated
    reason: str | None = "ContainerCreating"
    message: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int | None = None
    ready: bool = False
    started: bool = False  # the startup probe passed (or there is none) while running
    restart_count: int = 0
    last_terminated: Obj | None = None
    container_id: str = ""

    def state_obj(self) -> Obj:
        if self.state == "running":
            return {"running": {"startedAt": self.started_at}}
        if self.state == "terminated":
            return {"terminated": self.terminated_obj()}
        waiting: Obj = {"reason": self.reason or "ContainerCreating"}
        if self.message:
            waiting["message"] = self.message
        return {"waiting": waiting}

    def terminated_obj(self) -> Obj:
        out: Obj = {"exitCode": self.exit_code if self.exit_code is not None else -1,
                    "reason": self.reason or ("Completed" if self.exit_code == 0 else "Error"),
                    "startedAt": self.started_at, "finishedAt": self.finished_at,
                    "containerID": self.container_id}
        if self.message:
            out["message"] = self.message
        return out

    def status_obj(self) -> Obj:
        out: Obj = {"name": self.name, "image": self.image, "imageID": f"dm-testbed://{self.image}",
                    "ready": self.ready, "restartCount": self.restart_count, "state": self.state_obj(),
                    "lastState": {"terminated": self.last_terminated} if self.last_terminated else {}}
        if self.container_id:
            out["containerID"] = self.container_id
        if not self.init:
            out["started"] = self.state == "running" and self.started
        return out

    @property
    def succeeded(self) -> bool:
        return self.state == "terminated" and self.exit_code == 0


@dataclass
class PodView:
    restart_policy: str
    init: list[ContainerRecord] = field(default_factory=list)
    containers: list[ContainerRecord] = field(default_factory=list)


def phase(view: PodView) -> str:
    """Kubernetes' getPhase: Pending until every container has started once; Running while any
    runs or will be restarted; Succeeded/Failed when all have stopped for good."""
    for c in view.init:
        if not c.succeeded:
            if c.state == "terminated" and view.restart_policy == "Never":
                return "Failed"
            return "Pending"
    running = waiting = stopped = succeeded = 0
    for c in view.containers:
        if c.state == "running":
            running += 1
        elif c.state == "terminated":
            stopped += 1
            succeeded += c.exit_code == 0
        elif c.last_terminated is not None:
            stopped += 1
            succeeded += c.last_terminated.get("exitCode") == 0
        else:
            waiting += 1
    if waiting > 0:
        return "Pending"
    if running > 0:
        return "Running"
    if stopped > 0:
        if view.restart_policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        if view.restart_policy == "Never":
            return "Failed"
        return "Running"
    return "Pending"


def _condition(kind: str, ok: bool, previous: list[Obj], reason: str | None = None) -> Obj:
    status = "True" if ok else "False"
    old = next((c for c in previous if c.get("type") == kind), None)
    since = old["lastTransitionTime"] if old and old.get("status") == status else now_rfc3339()
    out: Obj = {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": since}
    if reason and not ok:
        out["reason"] = reason
    return out


def pod_status(pod: Obj, view: PodView, *, pod_ip: str | None, host_ip: str, start_time: str,
               message: str | None = None, reason: str | None = None) -> Obj:
    previous = pod.get("status", {}).get("conditions", [])
    initialized = all(c.succeeded for c in view.init)
    containers_ready = bool(view.containers) and all(c.ready for c in view.containers)
    current_phase = phase(view)
    # Ready is False once the pod has finished (Succeeded/Failed), whatever the containers say.
    ready = containers_ready and current_phase == "Running"
    not_ready_reason = "PodCompleted" if current_phase in ("Succeeded", "Failed") else "ContainersNotReady"
    conditions = [
        _condition("Initialized", initialized, previous, "ContainersNotInitialized"),
        _condition("Ready", ready, previous, not_ready_reason),
        _condition("ContainersReady", containers_ready, previous, not_ready_reason),
    ]
    conditions += [c for c in previous if c.get("type") == "PodScheduled"]
    status: Obj = {
        "phase": current_phase,
        "conditions": conditions,
        "hostIP": host_ip,
        "startTime": start_time,
        "containerStatuses": [c.status_obj() for c in view.containers],
    }
    if view.init:
        status["initContainerStatuses"] = [c.status_obj() for c in view.init]
    if pod_ip:
        status["podIP"] = pod_ip
        status["podIPs"] = [{"ip": pod_ip}]
    status["message"] = message
    status["reason"] = reason
    return status
