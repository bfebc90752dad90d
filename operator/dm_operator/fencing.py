"""What Kubernetes knows of a broker sooner or better than its controller: that its pod is gone or
its container terminated (the broker is fenced at once instead of after its session timeout), and,
with rack awareness, which rack it is in (its node's label, which the broker cannot read)."""

from __future__ import annotations

import logging

from dm_broker.controller.controller import Controller

from . import naming
from .kube import ApiError, Kube
from .metrics import FENCES
from .models import DMClusterSpec
from .objects import Obj

log = logging.getLogger(__name__)


def fence_reason(event_type: str, pod: Obj) -> str | None:
    """Why a pod event means its broker is gone, or None."""
    if event_type == "DELETED":
        return "its pod was deleted"
    for status in (pod.get("status") or {}).get("containerStatuses", []):
        if status.get("name") == "broker" and "terminated" in (status.get("state") or {}):
            return "its container terminated"
    return None


async def on_pod_event(controller: Controller, cluster: str, labels: dict[str, str], event_type: str,
                       pod: Obj) -> None:
    """A broker whose pod is gone, or whose container has terminated, and which holds no session to
    the controller, is fenced at once."""
    broker_id = naming.broker_id_of(pod["metadata"]["name"], cluster)
    if broker_id is None or controller.has_session(broker_id):
        return
    reason = fence_reason(event_type, pod)
    if reason and await controller.fence(broker_id, reason):
        FENCES.labels(**labels).inc()


class RackResolver:
    """With rack awareness on, a broker's rack is its node's label."""

    def __init__(self, kube: Kube, namespace: str, cluster: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.cluster = cluster
        self.spec: DMClusterSpec | None = None

    async def __call__(self, broker_id: int, sent: str | None) -> str | None:
        spec = self.spec
        if spec is None or spec.rack is None:
            return sent
        pod = await self.kube.get_or_none(f"/api/v1/namespaces/{self.namespace}/pods/"
                                          f"{naming.pod(self.cluster, broker_id)}")
        node_name = (pod or {}).get("spec", {}).get("nodeName")
        if not node_name:
            return sent
        try:
            node = await self.kube.get(f"/api/v1/nodes/{node_name}")
        except ApiError as exc:
            log.warning("%s/%s: cannot read node %s for broker %d's rack: %s", self.namespace, self.cluster,
                        node_name, broker_id, exc)
            return sent
        return (node["metadata"].get("labels") or {}).get(spec.rack.topologyKey, sent)
