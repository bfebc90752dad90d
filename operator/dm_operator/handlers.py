"""kopf handlers: thin adapters from watch events to the Operator. Every event feeds the watch cache
and wakes the runtime of the DMCluster it concerns; the decisions are elsewhere.

Only event handlers are used: the reconcile loop of each DMCluster is level-based, so kopf keeps no
handler progress in the objects. The operator puts no finalizer on anything (ADR 0061): a DMCluster's
children are garbage-collected through ownerReferences even when the operator is not running, and a
deleted Topic or User leaves the watch cache, which wakes its cluster's runtime to act on the deletion.
Finalizers earlier versions put on Topics and Users are released here when their cluster is gone."""

from __future__ import annotations

from typing import Any

import kopf

from . import API_VERSION, GROUP, VERSION, naming
from .objects import Obj, being_deleted
from .operator import Operator
from .runtime import dmcluster_path
from .store import cluster_of
from .topics import orphan_topic, release_orphans
from .users import release as release_user
from .users import release_orphans as release_orphan_users
from .users import user_cluster, users_path

# The children the operator keeps (all labelled managed-by dm-operator): what changes in them wakes
# their cluster's runtime, which puts back what drifted.
CHILDREN = [("v1", "serviceaccounts"), ("v1", "services"), ("v1", "configmaps"), ("v1", "persistentvolumeclaims"),
            ("v1", "secrets"), ("apps/v1", "statefulsets"), ("policy", "poddisruptionbudgets"),
            ("networking.k8s.io/v1", "networkpolicies")]


def register(registry: kopf.OperatorRegistry, operator: Operator) -> None:
    cache = operator.cache

    @kopf.on.event(GROUP, VERSION, "dmclusters", registry=registry)
    async def dmcluster_event(type: str | None, body: kopf.Body, namespace: str, name: str, **_: Any) -> None:
        obj = dict(body)
        cache.observe(obj, deleted=type == "DELETED")
        if type == "DELETED" or being_deleted(obj):
            await operator.remove(namespace, name)
            # Topics and Users with an earlier version's finalizer no longer need the operator to go away
            # (a namespace being deleted deletes them all at once, and nothing would wake their runtime).
            await release_orphans(operator.kube, namespace, cluster=name)
            await release_orphan_users(operator.kube, namespace, cluster=name)
            return
        operator.ensure(namespace, name, obj["metadata"]["uid"])

    async def cluster_serves(namespace: str, cluster: str) -> tuple[bool, Obj | None]:
        """For a Topic or User its cluster's runtime has not picked up: whether the DMCluster exists
        and is not being deleted (its runtime is started, and reconciles the resource), and the
        DMCluster as read."""
        dmcluster = await operator.kube.get_or_none(dmcluster_path(namespace, cluster))
        if dmcluster is None or being_deleted(dmcluster):
            return False, dmcluster
        cache.observe({"apiVersion": API_VERSION, "kind": "DMCluster", **dmcluster})
        operator.ensure(namespace, cluster, dmcluster["metadata"]["uid"])
        return True, dmcluster

    @kopf.on.event(GROUP, VERSION, "topics", registry=registry)
    async def topic_event(type: str | None, body: kopf.Body, namespace: str, **_: Any) -> None:
        obj = dict(body)
        cache.observe(obj, deleted=type == "DELETED")
        cluster = cluster_of(obj)
        if operator.wake(namespace, cluster) or type == "DELETED":
            return
        served, dmcluster = await cluster_serves(namespace, cluster)
        if not served:
            await orphan_topic(operator.kube, namespace, obj, dmcluster)

    @kopf.on.event(GROUP, VERSION, "users", registry=registry)
    async def user_event(type: str | None, body: kopf.Body, namespace: str, name: str, **_: Any) -> None:
        obj = {"apiVersion": API_VERSION, "kind": "User", **dict(body)}
        cache.observe(obj, deleted=type == "DELETED")
        cluster = user_cluster(obj)
        if operator.wake(namespace, cluster) or type == "DELETED":
            return
        served, _dmcluster = await cluster_serves(namespace, cluster)
        if not served and being_deleted(obj):
            # Its DMCluster is gone, and its credentials and ACLs with it: nothing is left to remove.
            await release_user(operator.kube, f"{users_path(namespace)}/{name}", obj, cache)

    @kopf.on.event("", "v1", "pods", labels=naming.MANAGED, registry=registry)
    async def pod_event(type: str | None, body: kopf.Body, namespace: str, labels: kopf.Labels, **_: Any) -> None:
        cache.observe(dict(body), deleted=type == "DELETED")
        runtime = operator.runtime(namespace, labels.get("app.kubernetes.io/instance", ""))
        if runtime is not None and labels.get("app.kubernetes.io/component") == "broker":
            await runtime.on_pod_event(type or "ADDED", dict(body))

    async def child_event(type: str | None, body: kopf.Body, namespace: str, labels: kopf.Labels, **_: Any) -> None:
        cache.observe(dict(body), deleted=type == "DELETED")
        operator.wake(namespace, labels.get("app.kubernetes.io/instance", ""))

    for group_version, plural in CHILDREN:
        kopf.on.event(*group_version.split("/") if "/" in group_version else (group_version,), plural,
                      labels=naming.MANAGED, id=f"child-{plural}", registry=registry)(child_event)
