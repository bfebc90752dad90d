"""Helpers the e2e scenarios share: kubectl for what changes the cluster, one API client connection for
what reads it (kubeapi.py: a poll is a GET, not a process)."""

from __future__ import annotations

import subprocess
import textwrap
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import yaml
from kubeapi import ApiUnavailable, NotFound
from measurements import note

T = TypeVar("T")


class Kubectl(Protocol):
    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout_s: float = 60) -> subprocess.CompletedProcess[str]: ...

    def get(self, *args: str) -> Any:
        """`kubectl get ARGS -o json`, parsed (kubeapi.ApiReader); NotFound if there is no such object."""


def wait_until(check: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.25) -> T:
    """Polls `check` until it returns something truthy; fails with `what` and the last value."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (subprocess.SubprocessError, ApiUnavailable) as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what} (last: {last!r})")


def apply(k: Kubectl, manifest: str | dict | list, namespace: str | None = None) -> None:
    if isinstance(manifest, dict):
        text = yaml.safe_dump(manifest)
    elif isinstance(manifest, list):
        text = yaml.safe_dump_all(manifest)
    else:
        text = textwrap.dedent(manifest)
    args = ["apply", "-f", "-"] + (["-n", namespace] if namespace else [])
    k.kubectl(*args, input=text)


def get_json(k: Kubectl, *args: str) -> Any:
    try:
        return k.get(*args)
    except NotFound as exc:
        raise AssertionError(str(exc)) from None


def get_or_none(k: Kubectl, *args: str) -> Any:
    """None only if there is no such object: an API server that does not answer is not an answer (a polling
    loop tries again, see wait_until)."""
    try:
        return k.get(*args)
    except NotFound:
        return None


def pod_ready(pod: dict | None) -> bool:
    if not pod or pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def wait_pods_ready(k: Kubectl, namespace: str, selector: str, count: int, timeout_s: float = 120) -> list[dict]:
    def ready() -> list[dict] | None:
        pods = get_json(k, "pods", "-n", namespace, "-l", selector)["items"]
        live = [p for p in pods if pod_ready(p)]
        return live if len(live) == count and len(pods) == count else None

    return wait_until(ready, timeout_s, f"{count} ready pods {selector} in {namespace}")


# Pod Security "restricted" (every e2e namespace enforces it where the API server serves the admission
# plugin, 1.23+): what a client pod of the tests needs to run there.
RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                  "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def create_namespace(k: Kubectl, name: str) -> None:
    """A namespace whose pods must pass Pod Security "restricted" (enforced from Kubernetes 1.23 on; the
    label is inert before, where tests/unit/test_pod_security.py checks the manifests instead)."""
    k.kubectl("create", "namespace", name)
    k.kubectl("label", "namespace", name, "pod-security.kubernetes.io/enforce=restricted",
              "pod-security.kubernetes.io/enforce-version=latest")


def delete_namespace(k: Kubectl, name: str, within_s: float = 60, at_most_s: float = 180) -> float:
    """`kubectl delete namespace` and the seconds until it is gone. After `within_s` (issue 66's bound) nothing of
    dm's may be left (no DMCluster, Topic or User, no finalizer but Kubernetes' own); what remains then can only be
    the kubelets still stopping pods and releasing their claims, which a loaded node stretches (on CI, pods past
    their 30 s grace were still listed at 60 s), so it fails only after `at_most_s`. Names what is left."""
    started = time.monotonic()
    k.kubectl("delete", "namespace", name, "--wait=false")
    checked = False
    while k.kubectl("get", "namespace", name, check=False).returncode == 0:
        waited = time.monotonic() - started
        if (waited > within_s and not checked) or waited > at_most_s:
            left = k.kubectl("get", "all,topics,users,dmclusters,pvc,configmaps,secrets", "-n", name, "-o",
                             "custom-columns=KIND:.kind,NAME:.metadata.name,FINALIZERS:.metadata.finalizers",
                             check=False).stdout
            rows = [line.split(None, 2) for line in left.splitlines()[1:] if line.strip()]
            ours = [r for r in rows if r[0] in ("DMCluster", "Topic", "User")
                    or any(not f.startswith("kubernetes.io/") for f in r[-1].strip("[]").split() if f != "<none>")]
            if ours or waited > at_most_s:
                raise AssertionError(f"namespace {name} still there after {waited:.0f}s:\n{left}")
            note(f"namespace {name} after {within_s:.0f}s: nothing of dm's left, the kubelets still stopping:\n{left}")
            checked = True
        time.sleep(0.5)
    return time.monotonic() - started


def restricted(pod: dict) -> dict:
    pod["spec"]["securityContext"] = RESTRICTED_POD
    for container in pod["spec"]["containers"]:
        container["securityContext"] = RESTRICTED_CONTAINER
    return pod


@dataclass(frozen=True)
class SecretKey:
    """An environment variable's value from a Secret (secretKeyRef)."""

    secret: str
    key: str


def env_list(env: Mapping[str, Any] | None) -> list[dict]:
    return [{"name": k, "valueFrom": {"secretKeyRef": {"name": v.secret, "key": v.key}}} if isinstance(v, SecretKey)
            else {"name": k, "value": str(v)} for k, v in (env or {}).items()]


def mount_secrets(pod: dict, secrets: Mapping[str, str] | None) -> dict:
    """Mounts each Secret (name → directory) into the pod's first container."""
    for i, (secret, path) in enumerate((secrets or {}).items()):
        pod["spec"]["volumes"].append({"name": f"secret{i}", "secret": {"secretName": secret}})
        pod["spec"]["containers"][0]["volumeMounts"].append({"name": f"secret{i}", "mountPath": path,
                                                             "readOnly": True})
    return pod


def script_pod(name: str, script: str, *, image: str = "dm", restart: str = "Never",
               service_account: str | None = None, env: Mapping[str, Any] | None = None,
               claims: dict[str, str] | None = None, secrets: Mapping[str, str] | None = None) -> list[dict]:
    """A ConfigMap holding `script` and a Pod running it with python from the dm image; `claims`
    maps PersistentVolumeClaim names to where they are mounted, `secrets` Secret names."""
    pod: dict = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"restartPolicy": restart, "terminationGracePeriodSeconds": 5,
                 "containers": [{"name": "main", "image": image, "command": ["python", "-u", "/scripts/main.py"],
                                 "env": env_list(env),
                                 "volumeMounts": [{"name": "scripts", "mountPath": "/scripts"}]}],
                 "volumes": [{"name": "scripts", "configMap": {"name": f"{name}-script"}}]},
    }
    for i, (claim, path) in enumerate((claims or {}).items()):
        pod["spec"]["volumes"].append({"name": f"claim{i}", "persistentVolumeClaim": {"claimName": claim}})
        pod["spec"]["containers"][0]["volumeMounts"].append({"name": f"claim{i}", "mountPath": path})
    mount_secrets(pod, secrets)
    if service_account:
        pod["spec"]["serviceAccountName"] = service_account
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-script"},
          "data": {"main.py": textwrap.dedent(script)}}
    return [cm, restricted(pod)]


def run_script(k: Kubectl, namespace: str, script: str, timeout_s: float = 180, **kwargs: Any) -> str:
    """Runs `script` in a pod to completion; returns its output, fails if it did not exit 0."""
    name = f"script-{uuid.uuid4().hex[:8]}"
    apply(k, script_pod(name, script, **kwargs), namespace)

    def finished() -> str | None:
        pod = get_json(k, "pod", name, "-n", namespace)
        phase = pod.get("status", {}).get("phase")
        return phase if phase in ("Succeeded", "Failed") else None

    try:
        phase = wait_until(finished, timeout_s, f"pod {name} to finish")
    finally:
        logs = k.kubectl("logs", name, "-n", namespace, check=False).stdout
    assert phase == "Succeeded", f"script pod {name} failed:\n{logs}"
    k.kubectl("delete", "pod", name, "-n", namespace, "--wait=false", check=False)
    k.kubectl("delete", "configmap", f"{name}-script", "-n", namespace, "--wait=false", check=False)
    return logs


def container_status(pod: dict, container: str | None = None) -> dict:
    statuses = pod.get("status", {}).get("containerStatuses", [])
    return next((s for s in statuses if container is None or s["name"] == container), {})


def dump_namespace(k: Kubectl, namespace: str, out: Path) -> None:
    """Pods, events and container logs of a namespace, for a failed test's report."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "resources.txt").write_text(k.kubectl("get", "all,pvc,events", "-n", namespace, "-o", "wide",
                                                 check=False).stdout)
    pods = get_or_none(k, "pods", "-n", namespace) or {"items": []}
    for pod in pods["items"]:
        for c in pod["spec"]["containers"]:
            name = f"{pod['metadata']['name']}.{c['name']}"
            (out / f"{name}.log").write_text(k.kubectl("logs", pod["metadata"]["name"], "-c", c["name"], "-n",
                                                       namespace, check=False).stdout)
