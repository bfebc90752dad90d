"""Kubernetes' Pod Security Standards, "restricted" profile (the baseline controls plus the restricted
ones, as the PodSecurity admission plugin enforces them at `latest`), as a check of a pod spec: for
clusters older than 1.23, which do not serve the admission plugin, and for manifests before they are
applied. https://kubernetes.io/docs/concepts/security/pod-security-standards/"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
ALLOWED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected",
                   "secret"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {None, "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def pod_specs(manifest: Obj) -> list[tuple[str, Obj]]:
    """The pod specs a manifest makes (a Pod, or a workload's template), named."""
    kind, name = manifest.get("kind"), manifest.get("metadata", {}).get("name")
    spec = manifest.get("spec") or {}
    if kind == "Pod":
        return [(f"Pod {name}", spec)]
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        return [(f"{kind} {name}", spec["template"]["spec"])]
    if kind == "CronJob":
        return [(f"CronJob {name}", spec["jobTemplate"]["spec"]["template"]["spec"])]
    return []


def restricted_violations(pod: Obj) -> list[str]:
    out = []
    psc = pod.get("securityContext") or {}
    containers = [*(pod.get("initContainers") or []), *(pod.get("containers") or []),
                  *(pod.get("ephemeralContainers") or [])]
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            out.append(f"{field} is true")
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            out.append(f"volume {volume['name']} is of type {sorted(kinds - ALLOWED_VOLUMES)}")
    for sysctl in psc.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            out.append(f"sysctl {sysctl.get('name')} is not safe")
    if (psc.get("seLinuxOptions") or {}).get("type") not in SELINUX_TYPES:
        out.append("pod seLinuxOptions.type is not allowed")
    if psc.get("runAsUser") == 0:
        out.append("pod runAsUser is 0")
    if (psc.get("seccompProfile") or {}).get("type") == "Unconfined":
        out.append("pod seccompProfile is Unconfined")
    for c in containers:
        name = c.get("name")
        sc = c.get("securityContext") or {}
        caps = sc.get("capabilities") or {}
        if sc.get("privileged"):
            out.append(f"container {name} is privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"container {name} does not set allowPrivilegeEscalation: false")
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"container {name} does not drop ALL capabilities")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"container {name} adds capabilities {sorted(set(caps['add']) - {'NET_BIND_SERVICE'})}")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            out.append(f"container {name} uses a hostPort")
        if sc.get("procMount") not in (None, "Default"):
            out.append(f"container {name} procMount is {sc['procMount']}")
        if (sc.get("seLinuxOptions") or {}).get("type") not in SELINUX_TYPES:
            out.append(f"container {name} seLinuxOptions.type is not allowed")
        run_as_non_root = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
        if run_as_non_root is not True:
            out.append(f"container {name} may run as root (runAsNonRoot is not true)")
        if sc.get("runAsUser") == 0:
            out.append(f"container {name} runAsUser is 0")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"container {name} has no RuntimeDefault or Localhost seccompProfile")
    return out
