"""A container's environment as the kubelet builds it (pure functions): service links, env and
envFrom with ConfigMap/Secret keys and downward-API values, and `$(VAR)` expansion."""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]


class EnvError(Exception):
    """CreateContainerConfigError: a referenced ConfigMap, Secret or key is missing."""


def service_env(services: list[Obj], master: Obj | None) -> dict[str, str]:
    """Docker-link style variables for each Service with a cluster IP (enableServiceLinks), plus
    KUBERNETES_SERVICE_HOST/PORT from the master service."""
    env: dict[str, str] = {}
    for svc in [*services, *([master] if master else [])]:
        ip = svc["spec"].get("clusterIP")
        if not ip or ip == "None":
            continue
        name = svc["metadata"]["name"].upper().replace("-", "_")
        ports = svc["spec"].get("ports", [])
        if not ports:
            continue
        env[f"{name}_SERVICE_HOST"] = ip
        env[f"{name}_SERVICE_PORT"] = str(ports[0]["port"])
        for port in ports:
            if port.get("name"):
                env[f"{name}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"] = str(port["port"])
        first = ports[0]
        proto = first.get("protocol", "TCP")
        env[f"{name}_PORT"] = f"{proto.lower()}://{ip}:{first['port']}"
        for port in ports:
            p = port.get("protocol", "TCP")
            prefix = f"{name}_PORT_{port['port']}_{p}"
            env[prefix] = f"{p.lower()}://{ip}:{port['port']}"
            env[f"{prefix}_PROTO"] = p.lower()
            env[f"{prefix}_PORT"] = str(port["port"])
            env[f"{prefix}_ADDR"] = ip
    return env


_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)`: replaced when VAR is defined, kept as written otherwise; `$$` is `$`."""

    def sub(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _VAR.sub(sub, value)


def field_value(pod: Obj, path: str) -> str:
    """A downward-API fieldRef."""
    meta = pod["metadata"]
    spec = pod.get("spec", {})
    status = pod.get("status", {})
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if m:
        return meta.get(m.group(1), {}).get(m.group(2), "")
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": status.get("hostIP", ""),
        "status.podIP": status.get("podIP", ""),
        "status.podIPs": ",".join(p["ip"] for p in status.get("podIPs", [])),
    }
    if path in ("metadata.labels", "metadata.annotations"):
        items = meta.get(path.split(".")[1], {})
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    if path not in simple:
        raise EnvError(f"unsupported fieldRef {path!r}")
    return simple[path]


_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30,
          "Ti": 2**40, "m": 0.001}


def quantity(text: str) -> float:
    m = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(text))
    if not m or m.group(2) not in _UNITS:
        raise EnvError(f"cannot read quantity {text!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


def resource_value(container: Obj, ref: Obj, node_allocatable: Mapping[str, str]) -> str:
    """A resourceFieldRef: limits fall back to the node's allocatable, requests to 0."""
    resource = ref["resource"]
    kind, _, name = resource.partition(".")
    resources = container.get("resources", {})
    raw = resources.get(kind, {}).get(name)
    if raw is None and kind == "limits":
        raw = node_allocatable.get(name, "0")
    value = quantity(raw or "0")
    divisor = quantity(ref.get("divisor", "1") or "1")
    result = value / divisor
    # Kubernetes rounds up to an integer.
    return str(int(-(-result // 1)))


def container_env(pod: Obj, container: Obj, *, services: dict[str, str], configmaps: Mapping[str, Obj | None],
                  secrets: Mapping[str, Obj | None], node_allocatable: Mapping[str, str],
                  base: Mapping[str, str]) -> dict[str, str]:
    """The environment in Kubernetes' order: base (PATH, HOSTNAME), service links, envFrom, env;
    later entries win and `$(VAR)` sees everything defined before it."""
    env: dict[str, str] = dict(base)
    env.update(services)
    for source in container.get("envFrom", []):
        prefix = source.get("prefix", "")
        if "configMapRef" in source:
            ref = source["configMapRef"]
            cm = configmaps.get(ref["name"])
            if cm is None:
                if ref.get("optional"):
                    continue
                raise EnvError(f'configmap "{ref["name"]}" not found')
            for k, v in (cm.get("data") or {}).items():
                env[prefix + k] = v
        elif "secretRef" in source:
            ref = source["secretRef"]
            secret = secrets.get(ref["name"])
            if secret is None:
                if ref.get("optional"):
                    continue
                raise EnvError(f'secret "{ref["name"]}" not found')
            for k, v in (secret.get("data") or {}).items():
                env[prefix + k] = base64.b64decode(v).decode(errors="replace")
    for item in container.get("env", []):
        name = item["name"]
        if "value" in item or "valueFrom" not in item:
            env[name] = expand(item.get("value", ""), env)
            continue
        source = item["valueFrom"]
        if "fieldRef" in source:
            env[name] = field_value(pod, source["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in source:
            env[name] = resource_value(container, source["resourceFieldRef"], node_allocatable)
        elif "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            cm = configmaps.get(ref["name"])
            value = None if cm is None else (cm.get("data") or {}).get(ref["key"])
            if value is None:
                if ref.get("optional"):
                    continue
                raise EnvError(f'configmap "{ref["name"]}" key "{ref["key"]}" not found')
            env[name] = value
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            secret = secrets.get(ref["name"])
            raw = None if secret is None else (secret.get("data") or {}).get(ref["key"])
            if raw is None:
                if ref.get("optional"):
                    continue
                raise EnvError(f'secret "{ref["name"]}" key "{ref["key"]}" not found')
            env[name] = base64.b64decode(raw).decode(errors="replace")
    return env


def referenced_objects(container: Obj) -> tuple[set[str], set[str]]:
    """Names of the ConfigMaps and Secrets a container's env refers to."""
    cms: set[str] = set()
    secrets: set[str] = set()
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            cms.add(source["configMapRef"]["name"])
        if "secretRef" in source:
            secrets.add(source["secretRef"]["name"])
    for item in container.get("env", []):
        source = item.get("valueFrom", {})
        if "configMapKeyRef" in source:
            cms.add(source["configMapKeyRef"]["name"])
        if "secretKeyRef" in source:
            secrets.add(source["secretKeyRef"]["name"])
    return cms, secrets
