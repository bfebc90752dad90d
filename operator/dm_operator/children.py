"""A DMCluster's children — ServiceAccount, Services, PodDisruptionBudget, ConfigMap, StatefulSet, the
controller token Secret — kept equal to what the spec asks, not merely patched towards it.

A child is written with a replace (PUT) of the whole desired object, carrying the observed
resourceVersion, so a field the spec no longer sets (a toleration, a nodeSelector, a label) is removed,
and a change someone made to the child by hand is undone. Only what the API server or another
controller owns is carried over from the live object (a Service's cluster IP, a ServiceAccount's token
Secrets, others' labels and annotations), and a part Kubernetes will not change in place (a
StatefulSet's volume claim templates) is kept and reported.

Nothing is written when nothing differs: the desired object's hash is in an annotation, and the live
object's content is remembered after each write, so a hand edit shows as a difference from what the
operator last saw and is corrected, with an Event. After a restart of the operator each child is
written once, and only a write that changed the child's content counts as a correction."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import logging
import secrets
from typing import Any

from . import manifests, naming
from .cache import ObjectCache, key_of
from .events import EventRecorder
from .kube import PLURALS, ApiError, Kube, collection_path, object_path
from .metrics import DRIFT_CORRECTED
from .objects import Obj, annotations_of, labels_of

log = logging.getLogger(__name__)
APPLIED = "dm.dev/applied"

# Fields a replace must not drop, owned by the API server or another controller: kept from the live
# object when the desired one does not set them.
CARRIED: dict[str, list[tuple[str, ...]]] = {
    "Service": [("spec", "clusterIP"), ("spec", "clusterIPs"), ("spec", "ipFamilies"), ("spec", "ipFamilyPolicy"),
                ("spec", "healthCheckNodePort")],
    "ServiceAccount": [("secrets",)],
}


def content_hash(obj: Obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _get(obj: Obj, path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def _set(obj: Obj, path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        obj = obj.setdefault(part, {})
    obj[path[-1]] = value


def fingerprint(live: Obj, desired: Obj) -> str:
    """The live object's content as far as the operator sets it: everything but status and metadata,
    plus the labels, annotations and owners the desired object has."""
    mine_labels = set(labels_of(desired))
    mine_annotations = set(annotations_of(desired))
    content = copy.deepcopy({k: v for k, v in live.items() if k not in ("metadata", "status", "apiVersion", "kind")})
    for path in CARRIED.get(desired["kind"], []):  # others' fields: their changes are no drift
        if _get(desired, path) is None and _get(content, path) is not None:
            parent = _get(content, path[:-1]) if len(path) > 1 else content
            if isinstance(parent, dict):
                parent.pop(path[-1], None)
    content["@labels"] = {k: v for k, v in labels_of(live).items() if k in mine_labels}
    content["@annotations"] = {k: v for k, v in annotations_of(live).items() if k in mine_annotations}
    content["@owners"] = live["metadata"].get("ownerReferences")
    return content_hash(content)


def replacement(desired: Obj, live: Obj) -> Obj:
    """The body of a replace that makes `live` equal `desired`, keeping what others own."""
    body = copy.deepcopy(desired)
    meta, live_meta = body["metadata"], live["metadata"]
    meta["resourceVersion"] = live_meta["resourceVersion"]
    meta["labels"] = {**{k: v for k, v in labels_of(live).items() if k not in labels_of(desired)},
                      **labels_of(desired)}
    meta["annotations"] = {**{k: v for k, v in annotations_of(live).items() if k not in annotations_of(desired)},
                           **annotations_of(desired)}
    if live_meta.get("finalizers"):
        meta["finalizers"] = live_meta["finalizers"]
    for path in CARRIED.get(desired["kind"], []):
        if _get(body, path) is None and _get(live, path) is not None:
            _set(body, path, copy.deepcopy(_get(live, path)))
    return body


class Children:
    def __init__(self, kube: Kube, cache: ObjectCache, recorder: EventRecorder, namespace: str) -> None:
        self.kube = kube
        self.cache = cache
        self.recorder = recorder
        self.namespace = namespace
        self._seen: dict[tuple[str, str, str], str] = {}  # child -> its fingerprint after the last write

    async def live(self, desired: Obj) -> Obj | None:
        meta = desired["metadata"]
        return await self.cache.get(desired["apiVersion"], desired["kind"], PLURALS[desired["kind"]], self.namespace,
                                    meta["name"], naming.MANAGED)

    async def apply(self, desired: Obj, immutable: tuple[str, str] | None = None) -> str | None:
        """Makes the child equal `desired`. Returns a note when an immutable part could not change."""
        desired = copy.deepcopy(desired)
        desired["metadata"].setdefault("annotations", {})[APPLIED] = content_hash(desired)
        path = object_path(desired)
        live = await self.live(desired)
        if live is None:
            try:
                created = await self.kube.create(path.rsplit("/", 1)[0], desired)
                self._remember(created, desired)
                return None
            except ApiError as exc:
                if exc.status != 409:
                    raise
                # It exists, but not as the cache knows children (someone removed its labels).
                live = await self.kube.get(path)
        up_to_date = annotations_of(live).get(APPLIED) == annotations_of(desired)[APPLIED]
        if up_to_date and self._seen.get(key_of(desired)) == fingerprint(live, desired):
            return None
        for attempt in range(2):
            try:
                result, note = await self._replace(path, desired, live, immutable)
                break
            except ApiError as exc:
                if exc.status != 409 or attempt:
                    raise
                live = await self.kube.get(path)  # changed since the cache saw it: once more on the fresh one
        # Drift: what the operator last applied was changed by someone else, and this write changed it back.
        if up_to_date and fingerprint(result, desired) != fingerprint(live, desired):
            DRIFT_CORRECTED.labels(kind=desired["kind"]).inc()
            message = (f"{desired['kind']} {desired['metadata']['name']} was changed outside the operator; put back "
                       "to what the DMCluster asks")
            log.warning("%s: %s", self.namespace, message)
            self.recorder.record("DriftCorrected", message, "Warning")
        self._remember(result, desired)
        return note

    async def _replace(self, path: str, desired: Obj, live: Obj,
                       immutable: tuple[str, str] | None) -> tuple[Obj, str | None]:
        body = replacement(desired, live)
        try:
            return await self.kube.replace(path, body), None
        except ApiError as exc:
            if exc.status != 422 or immutable is None or _get(live, immutable) is None:
                raise
            # Everything else changes; the immutable part stays as it is and is reported.
            _set(body, immutable, copy.deepcopy(_get(live, immutable)))
            result = await self.kube.replace(path, body)
            return result, (f"{desired['kind']} {immutable[-1]} cannot change in place (e.g. storage size or class): "
                            f"{exc}")

    def _remember(self, obj: Obj, desired: Obj) -> None:
        obj = {"apiVersion": desired["apiVersion"], "kind": desired["kind"], **obj}
        self.cache.observe(obj)
        self._seen[key_of(obj)] = fingerprint(obj, desired)


async def ensure_token(kube: Kube, namespace: str, cluster: str, uid: str) -> str:
    """The per-cluster token brokers present to the controller: a Secret the operator creates once
    (owned by the DMCluster) and reads when it starts hosting the cluster's controller."""
    path = f"/api/v1/namespaces/{namespace}/secrets/{naming.token_secret(cluster)}"
    existing = await kube.get_or_none(path)
    if existing is None:
        body = manifests.token_secret(cluster, namespace, naming.owner_reference(cluster, uid), secrets.token_hex(32))
        try:
            await kube.create(collection_path("v1", "secrets", namespace), body)
        except ApiError as exc:
            if exc.status != 409:
                raise
        existing = await kube.get(path)
    return base64.b64decode(existing["data"]["token"]).decode()
