"""Node-local persistent volumes, the way the local-path provisioner gives them: a default
StorageClass with WaitForFirstConsumer binding; once the scheduler picks a node for a claim's first
pod, a directory is created for it and a `local` PersistentVolume pinned to that node binds the
claim, so the pod keeps its data on its node across restarts. A released volume (its claim
deleted) is deleted with its data (reclaimPolicy Delete)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
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


def storage_class() -> Obj:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": STORAGE_CLASS,
                         "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": PROVISIONER, "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer"}


def volume_for(pvc: Obj, node: str, root: Path) -> Obj:
    """The PersistentVolume for a claim whose first consumer was scheduled on `node` (pure)."""
    meta = pvc["metadata"]
    name = f"pvc-{meta['uid']}"
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER},
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
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.create_storage_class:
            await self.kube.create_or_get("/apis/storage.k8s.io/v1/storageclasses", storage_class())
        self._tasks = [asyncio.create_task(self.claims.run()), asyncio.create_task(self.volumes.run())]
        await asyncio.gather(self.claims.synced.wait(), self.volumes.synced.wait())

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()

    async def _claim_event(self, kind: str, pvc: Obj) -> None:
        meta = pvc["metadata"]
        annotations = meta.get("annotations") or {}
        if kind == "DELETED" or pvc["spec"].get("volumeName") or meta.get("deletionTimestamp"):
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

    async def _volume_event(self, kind: str, pv: Obj) -> None:
        annotations = pv["metadata"].get("annotations") or {}
        if kind == "DELETED" or annotations.get("pv.kubernetes.io/provisioned-by") != PROVISIONER:
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
