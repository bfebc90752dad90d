"""A DMCluster's status — its brokers, conditions, bootstrap address, the moves in progress — and what
goes with it: an Event when a condition changes, and the cluster's Prometheus gauges. A status that
did not change is not written."""

from __future__ import annotations

from dm_broker.controller.controller import Controller
from dm_broker.controller.models import BrokerInfo

from . import naming
from .certificates import short
from .changes import offline, under_replicated
from .conditions import condition, merge_conditions
from .events import EventRecorder
from .kube import Kube
from .metrics import BROKERS, BROKERS_ON_LOST_NODES, OFFLINE, UNDER_REPLICATED
from .models import BrokerStatus
from .objects import Obj, pod_ready


def identity_condition(pods: dict[int, Obj]) -> Obj:
    """Brokers that refused to start because their volume belongs to another cluster (their last
    termination message says so)."""
    refused = []
    for broker_id, pod in sorted(pods.items()):
        for status in (pod.get("status") or {}).get("containerStatuses", []):
            message = ((status.get("lastState") or {}).get("terminated") or {}).get("message") or ""
            if status.get("name") == "broker" and "INCONSISTENT_CLUSTER_ID" in message:
                line = next((m for m in message.splitlines() if "INCONSISTENT_CLUSTER_ID" in m), message)
                refused.append(f"broker {broker_id}: {line.strip()}")
    if refused:
        return condition("ClusterIdentity", False, "InconsistentClusterId", "; ".join(refused)[:1000])
    return condition("ClusterIdentity", True, "Consistent", "every broker's volume belongs to this cluster")


def stray_condition(controller: Controller) -> Obj:
    """Logs brokers kept aside because no recorded decision allows deleting them (ADR 0017)."""
    strays = {b.node_id: b.stray_logs for b in controller.brokers.values() if b.stray_logs}
    if not strays:
        return condition("StrayData", False, "None", "no broker holds stray logs")
    listed = "; ".join(f"broker {b}: {', '.join(names)}" for b, names in sorted(strays.items()))
    return condition("StrayData", True, "StrayLogsKept",
                     f"logs kept aside, not deleted (inspect, then `kubectl exec <broker pod> -- dm strays "
                     f"delete <name> --data-dir {naming.DATA_PATH}`): {listed}"[:1000])


def broker_statuses(controller: Controller, replicas: int, pods: dict[int, Obj], cluster: str) -> list[Obj]:
    out = []
    for broker_id in sorted(set(range(replicas)) | set(pods)):
        pod = pods.get(broker_id)
        info = controller.brokers.get(broker_id)
        out.append(BrokerStatus(id=broker_id, pod=naming.pod(cluster, broker_id), ready=bool(pod) and pod_ready(pod),
                                fenced=bool(info and info.fenced), registered=info is not None,
                                strayLogs=list(info.stray_logs) if info else [], rack=info.rack if info else None,
                                node=(pod or {}).get("spec", {}).get("nodeName"),
                                certificate=presented_certificate(info), lastFailure=last_failure(pod)).model_dump())
    return out


LAST_FAILURE_CHARS = 500


def last_failure(pod: Obj | None) -> str | None:
    """How the pod's broker container last stopped with an error: a broker stopped by its full volume (ADR 0041)
    writes why to /dev/termination-log, which Kubernetes keeps in the container's state."""
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if status.get("name") != "broker":
            continue
        stopped = (status.get("state") or {}).get("terminated") or (status.get("lastState") or {}).get("terminated")
        if not stopped or not stopped.get("exitCode"):
            return None
        message = " ".join(str(stopped.get("message") or "").split())
        text = f"{stopped.get('finishedAt', '?')}: exit {stopped['exitCode']} ({stopped.get('reason', '?')})"
        return (f"{text}: {message}" if message else text)[:LAST_FAILURE_CHARS]
    return None


def presented_certificate(info: BrokerInfo | None) -> str | None:
    """What a broker's TLS listeners present, as its last heartbeat reported."""
    fingerprints = sorted({short(r.certificate) for r in (info.tls.values() if info else ()) if r.certificate})
    return ",".join(fingerprints) or None


def ready_condition(brokers: list[Obj], desired: int, config_ok: bool) -> Obj:
    serving = [b for b in brokers if b["id"] < desired and b["ready"] and b["registered"] and not b["fenced"]]
    if not config_ok:
        return condition("Ready", False, "InvalidConfig", "the broker configuration is invalid: see ConfigValid")
    if len(serving) < desired:
        return condition("Ready", False, "BrokersNotReady", f"{len(serving)}/{desired} brokers ready")
    return condition("Ready", True, "AllBrokersReady", f"{len(serving)}/{desired} brokers ready")


# Conditions whose change to a bad state deserves a Warning Event, with the Event's reason.
WARNINGS = {("ScaleDownBlocked", "True"): "ScaleDownBlocked", ("ConfigValid", "False"): "InvalidConfig",
            ("StrayData", "True"): "StrayLogsKept", ("CrdVersion", "False"): "CrdDowngradeRefused",
            ("SpecValid", "False"): "InvalidSpec", ("Certificates", "False"): "CertificateProblem"}


class StatusWriter:
    def __init__(self, kube: Kube, recorder: EventRecorder, path: str, controller: Controller,
                 labels: dict[str, str], last: Obj | None = None) -> None:
        self.kube = kube
        self.recorder = recorder
        self.path = path
        self.controller = controller
        self.labels = labels
        self.last = last  # the status as last written (or read at start)
        self.written: Obj | None = None  # the DMCluster as the last write answered

    async def write(self, status: Obj, force: bool = False) -> None:
        if not force and self.last is not None and all(self.last.get(k) == v for k, v in status.items()):
            return
        self.written = await self.kube.patch(f"{self.path}/status", {"status": status})
        self.last = {**(self.last or {}), **status}

    def conditions(self, new: list[Obj], generation: int | None) -> list[Obj]:
        previous = (self.last or {}).get("conditions", [])
        merged = merge_conditions(previous, new, generation)
        self._announce(previous, merged)
        return merged

    async def report_error(self, message: str) -> None:
        previous = (self.last or {}).get("conditions", [])
        await self.write({"conditions": merge_conditions(previous, [condition("Ready", False, "ReconcileError",
                                                                              message[:500])])}, force=True)

    def _announce(self, before: list[Obj], after: list[Obj]) -> None:
        old = {c["type"]: c for c in before}
        for c in after:
            prev = old.get(c["type"])
            if prev is not None and prev["status"] == c["status"] and prev.get("reason") == c.get("reason"):
                continue
            reason = WARNINGS.get((c["type"], c["status"]))
            if reason is not None:
                self.recorder.record(reason, c.get("message", ""), "Warning")
            elif c["type"] == "Ready" and (prev is not None or c["status"] == "True"):
                kind = "Normal" if c["status"] == "True" else "Warning"
                self.recorder.record(c["reason"], c.get("message", ""), kind)

    def publish_metrics(self) -> None:
        topics = self.controller.topics.values()
        OFFLINE.labels(**self.labels).set(sum(offline(t) for t in topics))
        UNDER_REPLICATED.labels(**self.labels).set(sum(under_replicated(t) for t in topics))
        fenced = sum(1 for b in self.controller.brokers.values() if b.fenced)
        BROKERS.labels(**self.labels, state="fenced").set(fenced)
        BROKERS.labels(**self.labels, state="live").set(len(self.controller.brokers) - fenced)

    def clear_metrics(self) -> None:
        for state in ("live", "fenced"):
            BROKERS.labels(**self.labels, state=state).set(0)
        BROKERS_ON_LOST_NODES.labels(**self.labels).set(0)  # another instance reports them once it leads
