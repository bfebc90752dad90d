"""kopf handlers: thin adapters from watch events to the Operator (no logic of their own).

Only event handlers are used: the reconcile loop of each DMCluster is level-based, so kopf keeps
no handler progress in the objects, and the operator puts no finalizer on a DMCluster (its children
are garbage-collected through ownerReferences even when the operator is not running). Topics carry
the operator's finalizer so a Topic's deletion deletes the Kafka topic; it is released at once when
the cluster is gone or being deleted, so a namespace never hangs on it."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from . import GROUP, VERSION
from .conditions import condition, merge_conditions
from .kube import ApiError
from .operator import Operator
from .runtime import release_finalizer
from .store import TOPIC_FINALIZER, cluster_of

log = logging.getLogger(__name__)
BROKER_PODS = {"app.kubernetes.io/name": "dm", "app.kubernetes.io/component": "broker"}


def register(registry: kopf.OperatorRegistry, operator: Operator) -> None:
    @kopf.on.event(GROUP, VERSION, "dmclusters", registry=registry)
    async def dmcluster_event(type: str, body: kopf.Body, namespace: str, name: str, **_: Any) -> None:
        if type == "DELETED" or body.metadata.get("deletionTimestamp"):
            await operator.remove(namespace, name)
            # Its Topics no longer need the operator to go away.
            await release_orphans(operator, namespace, cluster=name)
            return
        operator.ensure(namespace, name, body.metadata["uid"])

    @kopf.on.event(GROUP, VERSION, "topics", registry=registry)
    async def topic_event(type: str, body: kopf.Body, namespace: str, name: str, spec: kopf.Spec,
                          **_: Any) -> None:
        runtime = operator.runtime(namespace, cluster_of(dict(body)))
        if runtime is not None:
            runtime.wake.set()
            return
        if type == "DELETED":
            return
        await orphan_topic(operator, namespace, name, dict(body))

    @kopf.on.event("", "v1", "pods", labels=BROKER_PODS, registry=registry)
    async def broker_pod_event(type: str, body: kopf.Body, namespace: str, labels: kopf.Labels, **_: Any) -> None:
        runtime = operator.runtime(namespace, labels.get("app.kubernetes.io/instance", ""))
        if runtime is not None:
            await runtime.on_pod_event(type, dict(body))

    @kopf.on.event("apps", "v1", "statefulsets", labels=BROKER_PODS, registry=registry)
    async def statefulset_event(namespace: str, labels: kopf.Labels, **_: Any) -> None:
        runtime = operator.runtime(namespace, labels.get("app.kubernetes.io/instance", ""))
        if runtime is not None:
            runtime.wake.set()


async def orphan_topic(operator: Operator, namespace: str, name: str, obj: dict[str, Any]) -> None:
    """A Topic whose DMCluster this operator does not run. Without its cluster the finalizer has no
    job (there is no Kafka topic to delete), so it is released; the status says why nothing happens."""
    kube = operator.kube
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/topics/{name}"
    cluster = cluster_of(obj)
    dmcluster = await kube.get_or_none(f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/dmclusters/{cluster}")
    if dmcluster is not None and not dmcluster["metadata"].get("deletionTimestamp"):
        operator.ensure(namespace, cluster, dmcluster["metadata"]["uid"])  # not seen yet: it will pick this up
        return
    if TOPIC_FINALIZER in (obj["metadata"].get("finalizers") or []):
        await release_finalizer(kube, path, obj)
    if obj["metadata"].get("deletionTimestamp"):
        return
    status = obj.get("status") or {}
    reason = "ClusterNotFound" if dmcluster is None else "ClusterDeleting"
    message = f"DMCluster {cluster!r} does not exist in namespace {namespace}" if dmcluster is None else \
        f"DMCluster {cluster!r} is being deleted"
    conditions = merge_conditions(status.get("conditions", []), [condition("Ready", False, reason, message)],
                                  obj["metadata"].get("generation"))
    if [c.get("reason") for c in status.get("conditions", [])] != [reason]:
        try:
            await kube.patch(f"{path}/status", {"status": {"conditions": conditions,
                                                           "observedGeneration": obj["metadata"].get("generation")}})
        except ApiError as exc:
            log.warning("%s/%s: %s", namespace, name, exc)


async def release_orphans(operator: Operator, namespace: str, cluster: str | None = None,
                          only_terminating: bool = False) -> int:
    """Releases the finalizers of Topics whose cluster is gone (`cluster`), or of every Topic in a
    namespace being deleted; returns how many."""
    kube = operator.kube
    listing = await kube.get(f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/topics")
    released = 0
    for obj in listing.get("items", []):
        if TOPIC_FINALIZER not in (obj["metadata"].get("finalizers") or []):
            continue
        if cluster is not None and cluster_of(obj) != cluster:
            continue
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/topics/{obj['metadata']['name']}"
        await release_finalizer(kube, path, obj)
        released += 1
    return released


async def release_in_terminating_namespaces(operator: Operator) -> None:
    """At shutdown: a namespace being deleted takes the operator and its Topics at once; nothing is
    left to clean up in Kafka, so its Topics must not wait for an operator that will not come back."""
    kube = operator.kube
    try:
        listing = await kube.get("/api/v1/namespaces")
    except ApiError:
        return
    for ns in (n["metadata"]["name"] for n in listing.get("items", [])
               if n.get("status", {}).get("phase") == "Terminating"):
        try:
            count = await release_orphans(operator, ns)
        except ApiError:
            continue  # not a namespace this operator may touch
        if count:
            log.info("%s is being deleted: released %d Topic finalizers", ns, count)
