"""Whether a Topic or User the operator acted for was deleted, and whether that deletion was a decision
about it alone (ADR 0061). There are no finalizers: the operator learns of a deletion from the watch
(the resource leaves the cache) and confirms it with the API server before acting, because acting
deletes a topic's data or a user's access.

A deletion that comes with its DMCluster's, its namespace's or its CRD's is not about the resource:
the cluster goes anyway, or the CRD was deleted (perhaps by mistake), and deleting every topic then
would only lose data."""

from __future__ import annotations

from collections.abc import Callable

from . import GROUP
from .kube import Kube
from .objects import Obj, being_deleted

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


async def gone(kube: Kube, path: str, uid: str, belongs: Callable[[Obj], bool]) -> bool:
    """Whether the resource at `path` that had `uid` is gone from the cluster it belonged to: not found,
    being deleted (it carries a finalizer someone else put there), replaced by another of the same name,
    or no longer `belongs` (moved to another cluster). An API server that cannot say raises ApiError:
    not a deletion yet."""
    obj = await kube.get_or_none(path)
    return obj is None or obj["metadata"].get("uid") != uid or being_deleted(obj) or not belongs(obj)


async def wider_deletion(kube: Kube, namespace: str, cluster_path: str, plural: str) -> str | None:
    """Why a deletion in `namespace` is not about one resource — its DMCluster, its namespace or the CRD
    of `plural` going (or gone) — or None when nothing wider is being deleted. An API server that
    cannot say raises ApiError: nothing is decided, and the next pass asks again."""
    dmcluster = await kube.get_or_none(cluster_path)
    if dmcluster is None or being_deleted(dmcluster):
        return f"its DMCluster {cluster_path.rsplit('/', 1)[-1]} is being deleted"
    ns = await kube.get_or_none(f"/api/v1/namespaces/{namespace}")
    if ns is None or being_deleted(ns) or (ns.get("status") or {}).get("phase") == "Terminating":
        return f"namespace {namespace} is being deleted"
    crd = await kube.get_or_none(f"{CRD_PATH}/{plural}.{GROUP}")
    if crd is None or being_deleted(crd):
        return f"the CustomResourceDefinition {plural}.{GROUP} is being deleted"
    return None
