"""Kubernetes objects as the operator handles them: plain JSON dicts (the API's own shape, which
every module shares), and the few readers of them more than one module needs."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def labels_of(obj: Obj) -> dict[str, str]:
    return obj.get("metadata", {}).get("labels") or {}


def annotations_of(obj: Obj) -> dict[str, str]:
    return obj.get("metadata", {}).get("annotations") or {}


def pod_ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions", []))


def resource_version(obj: Obj) -> int | None:
    """The resourceVersion as a number where the API server gives one (etcd's revisions): the
    order of two versions of one object. None when it is not a number."""
    rv = str(obj.get("metadata", {}).get("resourceVersion", ""))
    return int(rv) if rv.isdigit() else None


def being_deleted(obj: Obj) -> bool:
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))
