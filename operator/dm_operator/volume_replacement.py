"""The I/O of replacing a broker's volume whose node is gone (ADR 0054; the rules are `lost_volumes`)."""

from __future__ import annotations

import datetime
import logging

from . import naming
from .events import EventRecorder
from .kube import ApiError, Kube, collection_path
from .lost_volumes import (
    LOST_NODE_ANNOTATION,
    REPLACED_CLAIM_ANNOTATION,
    Stranded,
    candidates,
    claimless,
    pinned_node,
    stranded,
    unscheduled,
)
from .objects import Obj, being_deleted

log = logging.getLogger(__name__)


def _delete_if(uid: str) -> Obj:
    """DeleteOptions that delete only the object we looked at (not one made since under its name)."""
    return {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": uid}}


async def find_stranded(kube: Kube, pods: dict[int, Obj], claims: dict[int, Obj],
                        volumes_seen: dict[str, Obj]) -> list[Stranded]:
    """The brokers whose unscheduled pod waits for a volume on a node that does not exist. API calls only for
    unscheduled pods with a bound claim: the volume (once: its node affinity cannot change; `volumes_seen`
    keeps it), then its node."""
    found = []
    for broker, pod, claim in candidates(pods, claims):
        name = claim["spec"]["volumeName"]
        pv = volumes_seen.get(name) or await kube.get_or_none(f"/api/v1/persistentvolumes/{name}")
        if pv is not None:
            volumes_seen[name] = pv
        node = pinned_node(pv) if pv is not None else None
        exists = None if node is None else await kube.get_or_none(f"/api/v1/nodes/{node}") is not None
        if (found_one := stranded(broker, pod, claim, pv, exists)) is not None:
            found.append(found_one)
    return found


async def replace_volume(kube: Kube, recorder: EventRecorder, namespace: str, cluster: str, s: Stranded) -> None:
    """The old volume kept (Retain, annotated with why), its claim and the waiting pod deleted: the StatefulSet
    makes a new claim and pod, placed on a live node."""
    how = "its claim was annotated" if s.approved else "spec.storage.lostNode.replaceVolume"
    message = (f"broker {s.broker}'s volume {s.volume} was on node {s.node}, which is gone; by {how}, its claim "
               f"{s.claim} is deleted and the broker starts on a new, empty volume and catches up from the other "
               f"replicas. The old volume is kept (reclaimPolicy Retain)")
    log.warning("%s/%s: %s", namespace, cluster, message)
    await kube.patch(f"/api/v1/persistentvolumes/{s.volume}",
                     {"metadata": {"annotations": {LOST_NODE_ANNOTATION: s.node,
                                                   REPLACED_CLAIM_ANNOTATION: f"{namespace}/{s.claim}"}},
                      "spec": {"persistentVolumeReclaimPolicy": "Retain"}})
    try:
        await kube.delete(f"{collection_path('v1', 'persistentvolumeclaims', namespace)}/{s.claim}",
                          _delete_if(s.claim_uid))
        await kube.delete(f"{collection_path('v1', 'pods', namespace)}/{naming.pod(cluster, s.broker)}",
                          _delete_if(s.pod_uid))
    except ApiError as exc:
        if exc.status != 409:
            raise
        log.info("%s/%s: broker %d's claim or pod changed meanwhile: %s", namespace, cluster, s.broker, exc)
        return
    recorder.record("VolumeReplaced", message, "Warning")


async def restart_claimless(kube: Kube, namespace: str, cluster: str, pods: dict[int, Obj],
                            claims: dict[int, Obj]) -> None:
    """Deletes each broker pod that waits unscheduled without a claim (checked again with the API server, not
    only the cache): the StatefulSet then makes both its claim and a new pod."""
    for broker in claimless(pods, claims, datetime.datetime.now(datetime.UTC)):
        claim = await kube.get_or_none(
            f"{collection_path('v1', 'persistentvolumeclaims', namespace)}/{naming.claim(cluster, broker)}")
        pod_path = f"{collection_path('v1', 'pods', namespace)}/{naming.pod(cluster, broker)}"
        pod = await kube.get_or_none(pod_path)
        if (claim is not None and not being_deleted(claim)) or pod is None or not unscheduled(pod):
            continue
        log.info("%s/%s: broker %d's pod waits for a claim that is gone; deleting it so that the StatefulSet "
                 "makes both again", namespace, cluster, broker)
        try:
            await kube.delete(pod_path, _delete_if(pod["metadata"].get("uid", "")))
        except ApiError as exc:
            if exc.status != 409:
                raise
