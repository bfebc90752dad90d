"""Rolling restarts: one broker at a time, by deleting its pod (SIGTERM, a controlled shutdown, then the
StatefulSet recreates it from the current template — its update strategy is OnDelete), and only when
`planning.next_roll_step` says no partition would drop below min.insync.replicas."""

from __future__ import annotations

import logging

from . import naming
from .conditions import condition
from .events import EventRecorder
from .kube import Kube
from .objects import Obj
from .planning import RollStep

log = logging.getLogger(__name__)


async def restart_broker(kube: Kube, recorder: EventRecorder, namespace: str, cluster: str, broker_id: int,
                         target: str, why: str | None = None) -> None:
    pod = naming.pod(cluster, broker_id)
    why = why or f"for revision {target}"
    log.info("%s/%s: rolling restart of broker %d %s", namespace, cluster, broker_id, why)
    recorder.record("RollingRestart", f"restarting broker {broker_id} (pod {pod}) {why}")
    await kube.delete(f"/api/v1/namespaces/{namespace}/pods/{pod}")


def roll_condition(step: RollStep) -> Obj:
    rolling = bool(step.outdated)
    if not rolling:
        return condition("RollingRestart", False, "UpToDate", "every broker runs the current revision")
    if step.restart is not None:
        return condition("RollingRestart", True, "Restarting", f"restarting broker {step.restart}")
    return condition("RollingRestart", True, "Waiting", step.wait or "")
