"""A pod's volumes as directories on this machine, bind-mounted into its containers at their
mountPaths: PersistentVolumeClaims (their PV's local path), ConfigMaps, Secrets, emptyDir,
hostPath, downwardAPI and projected volumes (ServiceAccount tokens from the TokenRequest API).

ConfigMap, Secret, downwardAPI and projected volumes are written the kubelet's way — files in a
timestamped directory behind a `..data` symlink that is swapped atomically — and refreshed while
the pod runs, so updates and token rotation reach running containers."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..kube import ApiError, Kube
from .env import EnvError, field_value, resource_value

Obj = dict[str, Any]
Files = dict[str, tuple[bytes, int]]  # relative path -> (content, mode)


class VolumeError(Exception):
    """The pod cannot start (CreateContainerConfigError); retried while the pod exists."""


class VolumePending(Exception):
    """Something the volume needs is not there yet (an unbound claim); retried shortly."""


def write_atomic(target: Path, files: Files) -> bool:
    """Replaces the visible content of `target` with `files` in one rename; False if unchanged."""
    target.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(repr(sorted((k, v[0], v[1]) for k, v in files.items())).encode()).hexdigest()
    marker = target.parent / f"..{target.name}.digest"
    if marker.exists() and marker.read_text() == digest:
        return False
    stamp = target / f"..{time.time_ns()}"
    stamp.mkdir()
    for rel, (data, mode) in files.items():
        path = stamp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
    tmp = target / "..data_tmp"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    os.symlink(stamp.name, tmp)
    os.rename(tmp, target / "..data")
    tops = {rel.split("/", 1)[0] for rel in files}
    for top in tops:
        link = target / top
        if not link.is_symlink():
            os.symlink(f"..data/{top}", link)
    for entry in target.iterdir():
        if entry.name.startswith(".."):
            if entry.is_dir() and not entry.is_symlink() and entry.name not in (stamp.name,):
                shutil.rmtree(entry, ignore_errors=True)
        elif entry.is_symlink() and entry.name not in tops:
            entry.unlink()
    marker.write_text(digest)
    return True


def _items(data: dict[str, bytes], items: list[Obj] | None, default_mode: int, what: str,
           optional: bool) -> Files:
    if not items:
        return {k: (v, default_mode) for k, v in data.items()}
    out: Files = {}
    for item in items:
        if item["key"] not in data:
            if optional:
                continue
            raise VolumeError(f'{what}: key "{item["key"]}" not found')
        out[item["path"]] = (data[item["key"]], item.get("mode", default_mode))
    return out


@dataclass
class TokenCache:
    token: bytes = b""
    issued_at: float = 0.0
    ttl_s: float = 0.0

    def stale(self) -> bool:
        return not self.token or time.time() - self.issued_at > 0.8 * self.ttl_s


@dataclass
class PodVolumes:
    """Materialises one pod's volumes under `root` (the pod's directory)."""

    kube: Kube
    pod: Obj
    root: Path
    node_allocatable: dict[str, str]
    paths: dict[str, Path] = field(default_factory=dict)
    tokens: dict[str, TokenCache] = field(default_factory=dict)

    @property
    def ns(self) -> str:
        return self.pod["metadata"]["namespace"]

    async def prepare(self) -> dict[str, Path]:
        for volume in self.pod["spec"].get("volumes", []):
            self.paths[volume["name"]] = await self._prepare_one(volume)
        return self.paths

    async def refresh(self) -> None:
        """Re-materialises the volumes whose sources can change while the pod runs."""
        for volume in self.pod["spec"].get("volumes", []):
            if any(k in volume for k in ("configMap", "secret", "projected", "downwardAPI")):
                with contextlib.suppress(VolumeError, VolumePending, ApiError, OSError):
                    await self._prepare_one(volume)

    async def _get(self, kind: str, name: str) -> Obj | None:
        return await self.kube.get_or_none(f"/api/v1/namespaces/{self.ns}/{kind}/{name}")

    async def _prepare_one(self, volume: Obj) -> Path:
        name = volume["name"]
        target = self.root / "volumes" / name
        if "persistentVolumeClaim" in volume:
            return await self._claim(volume["persistentVolumeClaim"]["claimName"])
        if "emptyDir" in volume:
            target.mkdir(parents=True, exist_ok=True)
            return target
        if "hostPath" in volume:
            spec = volume["hostPath"]
            path = Path(spec["path"])
            if spec.get("type") in ("DirectoryOrCreate",) and not path.exists():
                path.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                raise VolumeError(f'hostPath "{path}" does not exist')
            return path
        files = await self._files(volume, name)
        write_atomic(target, files)
        return target

    async def _files(self, volume: Obj, name: str) -> Files:
        if "configMap" in volume:
            return await self._configmap_files(volume["configMap"], volume["configMap"].get("defaultMode", 0o644))
        if "secret" in volume:
            return await self._secret_files(volume["secret"], volume["secret"].get("defaultMode", 0o644))
        if "downwardAPI" in volume:
            spec = volume["downwardAPI"]
            return self._downward_files(spec.get("items", []), spec.get("defaultMode", 0o644))
        if "projected" in volume:
            spec = volume["projected"]
            mode = spec.get("defaultMode", 0o644)
            files: Files = {}
            for i, source in enumerate(spec.get("sources", [])):
                if "serviceAccountToken" in source:
                    files.update(await self._token_files(source["serviceAccountToken"], f"{name}/{i}", mode))
                elif "configMap" in source:
                    files.update(await self._configmap_files(source["configMap"], mode))
                elif "secret" in source:
                    files.update(await self._secret_files(source["secret"], mode))
                elif "downwardAPI" in source:
                    files.update(self._downward_files(source["downwardAPI"].get("items", []), mode))
                else:
                    raise VolumeError(f"volume {name}: projected source {sorted(source)} is not supported")
            return files
        kinds = sorted(k for k in volume if k != "name")
        raise VolumeError(f"volume {name}: type {kinds} is not supported by the dm testbed")

    async def _claim(self, claim: str) -> Path:
        pvc = await self._get("persistentvolumeclaims", claim)
        if pvc is None:
            raise VolumePending(f'persistentvolumeclaim "{claim}" not found')
        if pvc.get("status", {}).get("phase") != "Bound":
            raise VolumePending(f'persistentvolumeclaim "{claim}" is not bound yet')
        pv = await self.kube.get_or_none(f"/api/v1/persistentvolumes/{pvc['spec']['volumeName']}")
        if pv is None:
            raise VolumePending(f"persistentvolume {pvc['spec']['volumeName']} not found")
        spec = pv["spec"]
        raw = (spec.get("local") or {}).get("path") or (spec.get("hostPath") or {}).get("path")
        if not raw:
            raise VolumeError(f"persistentvolume {pv['metadata']['name']}: only local and hostPath volumes "
                              "can be mounted on the dm testbed")
        path = Path(raw)
        path.mkdir(parents=True, exist_ok=True)
        return path

    async def _configmap_files(self, spec: Obj, mode: int) -> Files:
        cm = await self._get("configmaps", spec["name"])
        if cm is None:
            if spec.get("optional"):
                return {}
            raise VolumeError(f'configmap "{spec["name"]}" not found')
        data = {k: v.encode() for k, v in (cm.get("data") or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
        return _items(data, spec.get("items"), mode, f'configmap "{spec["name"]}"', bool(spec.get("optional")))

    async def _secret_files(self, spec: Obj, mode: int) -> Files:
        name = spec.get("secretName") or spec.get("name")
        secret = await self._get("secrets", name)
        if secret is None:
            if spec.get("optional"):
                return {}
            raise VolumeError(f'secret "{name}" not found')
        data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
        return _items(data, spec.get("items"), mode, f'secret "{name}"', bool(spec.get("optional")))

    def _downward_files(self, items: list[Obj], mode: int) -> Files:
        files: Files = {}
        for item in items:
            if "fieldRef" in item:
                try:
                    value = field_value(self.pod, item["fieldRef"]["fieldPath"])
                except EnvError as exc:
                    raise VolumeError(str(exc)) from None
            elif "resourceFieldRef" in item:
                ref = item["resourceFieldRef"]
                container = next((c for c in self.pod["spec"]["containers"] if c["name"] == ref.get("containerName")),
                                 self.pod["spec"]["containers"][0])
                value = resource_value(container, ref, self.node_allocatable)
            else:
                raise VolumeError(f"downwardAPI item {item.get('path')}: unsupported source")
            files[item["path"]] = (value.encode(), item.get("mode", mode))
        return files

    async def _token_files(self, spec: Obj, cache_key: str, mode: int) -> Files:
        cache = self.tokens.setdefault(cache_key, TokenCache())
        if cache.stale():
            sa = self.pod["spec"].get("serviceAccountName") or "default"
            expiry = int(spec.get("expirationSeconds", 3600))
            body: Obj = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                         "spec": {"expirationSeconds": expiry,
                                  "boundObjectRef": {"kind": "Pod", "apiVersion": "v1",
                                                     "name": self.pod["metadata"]["name"],
                                                     "uid": self.pod["metadata"]["uid"]}}}
            if spec.get("audience"):
                body["spec"]["audiences"] = [spec["audience"]]
            try:
                resp = await self.kube.create(f"/api/v1/namespaces/{self.ns}/serviceaccounts/{sa}/token", body)
            except ApiError as exc:
                raise VolumeError(f"serviceaccount token for {sa}: {exc}") from None
            cache.token = resp["status"]["token"].encode()
            cache.issued_at = time.time()
            cache.ttl_s = float(expiry)
        return {spec["path"]: (cache.token, mode)}
