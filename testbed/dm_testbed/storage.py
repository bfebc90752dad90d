"""Node-local persistent volumes, the way the local-path provisioner gives them: a default
StorageClass with WaitForFirstConsumer binding; once the scheduler picks a node for a claim's first
pod, a directory is created for it and a `local` PersistentVolume pinned to that node binds the
claim, so the pod keeps its data on its node across restarts. A released volume (its claim
deleted) is deleted with its data (reclaimPolicy Delete).

Volumes grow as a CSI driver's external resizer grows them once a bound claim asks for more than its
volume has: the volume's capacity is raised, then the claim's. The kubelet has no expansion for
`local` volumes, so this add-on also plays its part, in one of two ways its StorageClass chooses
(parameter `dm.dev/expansion`):
- `online` (the default class): the claim has its new capacity at once, as for a volume whose file
  system grows while it is mounted;
- `offline` (the `dm-offline-expansion` class): the claim is marked `FileSystemResizePending` and gets
  its new capacity only when a pod created since then runs with it, as for a file system that grows
  when it is mounted again. The operator restarts its brokers for that (ADR 0042).
A volume is a directory with no quota, so the space behind it is the node's either way."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from .kube import ApiError, Informer, Kube

log = logging.getLogger(__name__)
Obj = dict[str, Any]
PROVISIONER = "dm.dev/testbed-local-path"
STORAGE_CLASS = "standard"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
NODE_LABEL = "dm.dev/testbed-node"
PROVISIONER_ANNOTATIONS = ("volume.beta.kubernetes.io/storage-provisioner", "volume.kubernetes.io/storage-provisioner")
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
FS_RESIZE_PENDING = "FileSystemResizePending"
EXPANSION_PARAMETER = "dm.dev/expansion"
OFFLINE_STORAGE_CLASS = "dm-offline-expansion"
_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
             "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
             "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def storage_classes() -> list[Obj]:
    """The default class (volumes grow online) and one whose volumes grow offline."""
    common = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "provisioner": PROVISIONER,
              "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer", "allowVolumeExpansion": True}
    return [{**common, "metadata": {"name": STORAGE_CLASS,
                                    "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}},
            {**common, "metadata": {"name": OFFLINE_STORAGE_CLASS}, "parameters": {EXPANSION_PARAMETER: "offline"}}]


def quantity(text: str) -> Decimal:
    """A Kubernetes quantity ("2Gi", "1500M", "1e9", "0.5Ti") as a number (pure); ValueError if it is none.
    The add-on image carries aiohttp and dnslib only, not the kubernetes client's parse_quantity."""
    number = text.rstrip("KMGTPEiknum")
    try:
        return Decimal(number) * _SUFFIXES[text[len(number):]]
    except (KeyError, InvalidOperation):
        raise ValueError(f"not a quantity: {text!r}") from None


def growth(pvc: Obj, pv: Obj) -> str | None:
    """The size a bound claim asks of its volume beyond the volume's capacity, or None (pure). A volume
    never shrinks (the API server refuses a claim a smaller request than it had)."""
    requested = ((pvc.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage")
    capacity = ((pv.get("spec") or {}).get("capacity") or {}).get("storage")
    if not requested or not capacity:
        return None
    try:
        return requested if quantity(requested) > quantity(capacity) else None
    except ValueError:
        return None


def expansion_mode(storage_class: Obj | None) -> str:
    """How a class's volumes grow: "online" unless its `dm.dev/expansion` parameter says "offline" (pure)."""
    mode = ((storage_class or {}).get("parameters") or {}).get(EXPANSION_PARAMETER, "online")
    return mode if mode in ("online", "offline") else "online"


def _conditions(pvc: Obj) -> list[Obj]:
    return (pvc.get("status") or {}).get("conditions") or []


def _not_resizing(pvc: Obj) -> list[Obj]:
    return [c for c in _conditions(pvc) if c.get("type") not in ("Resizing", FS_RESIZE_PENDING)]


def resize_done(pvc: Obj, capacity: str) -> Obj:
    """The claim's status once its volume and file system have `capacity`: no resize condition left (pure)."""
    return {"capacity": {"storage": capacity}, "conditions": _not_resizing(pvc)}


def _pending(pvc: Obj) -> Obj | None:
    return next((c for c in _conditions(pvc) if c.get("type") == FS_RESIZE_PENDING), None)


def pending_since(pvc: Obj) -> str | None:
    """When the claim's file system began to wait for a pod to mount it again, or None (pure)."""
    pending = _pending(pvc)
    return None if pending is None else pending.get("lastTransitionTime") or ""


def mounts_grown(pod: Obj, pvc: Obj) -> bool:
    """Whether `pod` runs with the claim mounted since its file system began to wait (created at or after
    that second, the rule the operator uses to leave such a pod alone), so the file system has grown (pure)."""
    since = pending_since(pvc)
    meta = pod["metadata"]
    uses = any((v.get("persistentVolumeClaim") or {}).get("claimName") == pvc["metadata"]["name"]
               for v in (pod.get("spec") or {}).get("volumes") or [])
    return (since is not None and uses and meta.get("namespace") == pvc["metadata"]["namespace"]
            and not meta.get("deletionTimestamp") and (pod.get("status") or {}).get("phase") == "Running"
            and (meta.get("creationTimestamp") or "") >= since)


def resize_pending(pvc: Obj, now: str) -> list[Obj]:
    """The claim's conditions once its volume grew: FileSystemResizePending (since `now` unless it was
    already pending) in place of a Resizing one; others kept (pure)."""
    return [*_not_resizing(pvc), _pending(pvc) or {"type": FS_RESIZE_PENDING, "status": "True",
                                                 "lastProbeTime": None,
                                                 "lastTransitionTime": now,
                                                 "message": "Waiting for user to (re-)start a pod to finish file "
                                                            "system resize of volume on node."}]


def volume_for(pvc: Obj, node: str, root: Path) -> Obj:
    """The PersistentVolume for a claim whose first consumer was scheduled on `node` (pure)."""
    meta = pvc["metadata"]
    name = f"pvc-{meta['uid']}"
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {PROVISIONED_BY: PROVISIONER},
                     "labels": {NODE_LABEL: node}},
        "spec": {
            "capacity": {"storage": pvc["spec"]["resources"]["requests"]["storage"]},
            "accessModes": pvc["spec"].get("accessModes", ["ReadWriteOnce"]),
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": pvc["spec"].get("storageClassName") or STORAGE_CLASS,
            "volumeMode": "Filesystem",
            "local": {"path": str(root / name)},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": meta["namespace"],
                         "name": meta["name"], "uid": meta["uid"]},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
        },
    }


class LocalPathProvisioner:
    """Provisions for the claims scheduled on `node` (every node when None); `root` is where the
    volumes' directories are, as this process sees it and as the node does."""

    def __init__(self, kube: Kube, root: Path, node: str | None = None, create_storage_class: bool = True) -> None:
        self.kube = kube
        self.root = root
        self.node = node
        self.create_storage_class = create_storage_class
        self.claims = Informer(kube, "/api/v1/persistentvolumeclaims", self._claim_event)
        self.volumes = Informer(kube, "/api/v1/persistentvolumes", self._volume_event)
        self.pods = Informer(kube, "/api/v1/pods", self._pod_event)  # for file systems that grow at a mount
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.create_storage_class:
            for storage_class in storage_classes():
                await self.kube.create_or_get("/apis/storage.k8s.io/v1/storageclasses", storage_class)
        informers = (self.claims, self.volumes, self.pods)
        self._tasks = [asyncio.create_task(informer.run()) for informer in informers]
        await asyncio.gather(*(informer.synced.wait() for informer in informers))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()

    async def _claim_event(self, kind: str, pvc: Obj) -> None:
        meta = pvc["metadata"]
        annotations = meta.get("annotations") or {}
        if kind == "DELETED" or meta.get("deletionTimestamp"):
            return
        if pvc["spec"].get("volumeName"):
            await self._grow(pvc)
            return
        if not any(annotations.get(a) == PROVISIONER for a in PROVISIONER_ANNOTATIONS):
            return
        node = annotations.get(SELECTED_NODE)
        if not node or (self.node is not None and node != self.node):
            return
        pv = volume_for(pvc, node, self.root)
        Path(pv["spec"]["local"]["path"]).mkdir(parents=True, exist_ok=True)
        try:
            await self.kube.create("/api/v1/persistentvolumes", pv)
            log.info("provisioned %s for %s/%s on %s", pv["metadata"]["name"], meta["namespace"], meta["name"], node)
        except ApiError as exc:
            if exc.status != 409:
                log.warning("provisioning %s/%s: %s", meta["namespace"], meta["name"], exc)

    def _own_volume(self, pvc: Obj) -> Obj | None:
        """The bound claim's volume if this add-on made it on this node."""
        pv = self.volumes.cache.get(("", pvc["spec"].get("volumeName") or ""))
        if pv is None or (pv["metadata"].get("annotations") or {}).get(PROVISIONED_BY) != PROVISIONER:
            return None
        if self.node is not None and pv["metadata"].get("labels", {}).get(NODE_LABEL) != self.node:
            return None
        return pv

    async def _grow(self, pvc: Obj) -> None:
        """A bound claim of a volume of this node's: the volume grown if the claim asks for more, then the
        claim's capacity (online) or its FileSystemResizePending mark (offline); an offline claim a pod has
        mounted since then finished. Asked again at the claim's next change if a write fails."""
        pv = self._own_volume(pvc)
        if pv is None:
            return
        meta = pvc["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/persistentvolumeclaims/{meta['name']}"
        size = growth(pvc, pv)
        try:
            if size is not None:
                mode = expansion_mode(await self.kube.get_or_none(
                    f"/apis/storage.k8s.io/v1/storageclasses/{pv['spec'].get('storageClassName') or STORAGE_CLASS}"))
                grown = await self.kube.patch(f"/api/v1/persistentvolumes/{pv['metadata']['name']}",
                                              {"spec": {"capacity": {"storage": size}}})
                self.volumes.cache[("", pv["metadata"]["name"])] = grown
                if mode == "online":
                    status = resize_done(pvc, size)
                else:
                    status = {"conditions": resize_pending(pvc, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))}
                pvc = await self.kube.patch(f"{path}/status", {"status": status})
                self.claims.cache[(meta["namespace"], meta["name"])] = pvc
                log.info("grew %s to %s for %s/%s (%s)", pv["metadata"]["name"], size, meta["namespace"],
                         meta["name"], mode)
            if pending_since(pvc) is not None and any(mounts_grown(pod, pvc) for pod in self._pods_here()):
                capacity = self.volumes.cache[("", pv["metadata"]["name"])]["spec"]["capacity"]["storage"]
                await self.kube.patch(f"{path}/status", {"status": resize_done(pvc, capacity)})
                log.info("the file system of %s/%s grew to %s as a pod mounted it", meta["namespace"], meta["name"],
                         capacity)
        except ApiError as exc:
            log.warning("growing %s/%s: %s", meta["namespace"], meta["name"], exc)

    def _pods_here(self) -> list[Obj]:
        return [p for p in self.pods.cache.values()
                if self.node is None or (p.get("spec") or {}).get("nodeName") == self.node]

    async def _pod_event(self, kind: str, pod: Obj) -> None:
        """A pod running on this node: the claims it mounts whose file system waited for it finish growing."""
        if kind == "DELETED" or (self.node is not None and (pod.get("spec") or {}).get("nodeName") != self.node):
            return
        ns = pod["metadata"].get("namespace", "")
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            name = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            pvc = self.claims.cache.get((ns, name)) if name else None
            if pvc is not None and pending_since(pvc) is not None:
                await self._grow(pvc)  # finishes it if this pod (or another here) mounts it grown

    async def _volume_event(self, kind: str, pv: Obj) -> None:
        annotations = pv["metadata"].get("annotations") or {}
        if kind == "DELETED" or annotations.get(PROVISIONED_BY) != PROVISIONER:
            return
        if pv.get("status", {}).get("phase") not in ("Released", "Failed"):
            return
        if pv["spec"].get("persistentVolumeReclaimPolicy") != "Delete":
            return
        if self.node is not None and pv["metadata"].get("labels", {}).get(NODE_LABEL) != self.node:
            return
        path = Path(pv["spec"]["local"]["path"])
        if path.is_relative_to(self.root):
            shutil.rmtree(path, ignore_errors=True)
        with contextlib.suppress(ApiError):
            await self.kube.delete(f"/api/v1/persistentvolumes/{pv['metadata']['name']}")
        log.info("deleted %s and its data", pv["metadata"]["name"])
