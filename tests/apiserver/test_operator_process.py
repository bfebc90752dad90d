"""The real `dm-operator` process against a real API server, with the chart's own RBAC: a token of the
chart's ServiceAccount, so the API server refuses anything the chart's rules do not grant — every
call the operator makes here (kopf's watches, the leader election, children, status, Events, Topic
deletions) is checked against them, and a refusal in either operator's log fails the test.

Two instances, as the chart runs them: one leads and hosts the controllers, the other stands by and
serves no controller; when the leader stops (SIGTERM: it releases the Lease) or dies (SIGKILL: the Lease
expires) the standby takes over. The takeover times are printed (docs/benchmarks.md)."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from dm_testbed.client import Testbed
from harness import free_port

REPO = Path(__file__).resolve().parents[2]
RBAC_KINDS = {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
LEASE = {"DM_LEASE_DURATION": "4", "DM_LEASE_RENEW_DEADLINE": "3", "DM_LEASE_RETRY_PERIOD": "0.5"}


def helm(tb: Testbed) -> str:
    found = Path(tb.kubectl_path).parent / "helm"
    if not found.exists():
        pytest.skip("helm is not installed (make test installs it)")
    return str(found)


def install_rbac(tb: Testbed, ns: str) -> list[dict]:
    rendered = subprocess.run([helm(tb), "template", "dm", str(REPO / "charts" / "dm-cluster"), "-n", ns,
                               "--set", "cluster.enabled=false", "--set", "tests.enabled=false"],
                              capture_output=True, text=True, check=True).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] in RBAC_KINDS
            and not (d["metadata"].get("annotations") or {}).get("helm.sh/hook")]
    tb.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(docs))
    return docs


def sa_kubeconfig(tb: Testbed, ns: str, path: Path) -> Path:
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    (path.parent / "token-request.json").write_text(json.dumps(request))
    answer = tb.kubectl("create", "--raw", f"/api/v1/namespaces/{ns}/serviceaccounts/dm-operator/token",
                        "-f", str(path.parent / "token-request.json"))
    token = json.loads(answer.stdout)["status"]["token"]
    admin = yaml.safe_load(tb.kubeconfig.read_text())
    cluster = admin["clusters"][0]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
        "users": [{"name": "dm-operator", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": cluster["name"], "user": "dm-operator"}}],
        "current-context": "sa"}))
    return path


class OperatorProcess:
    def __init__(self, name: str, kubeconfig: Path, ns: str, log_dir: Path) -> None:
        self.name, self.port = name, free_port()
        self.log = log_dir / f"operator-{name}.log"
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "DM_WATCH_NAMESPACES": ns, "DM_LEADER_ELECTION": "true",
               "DM_POD_NAMESPACE": ns, "DM_POD_NAME": name, "DM_LEASE_NAME": "dm-operator", "DM_IMAGE": "dm:test",
               "DM_CONTROLLER_URL": f"http://dm-operator.{ns}.svc:9990", "DM_OPERATOR_TLS_PORT": str(free_port()),
               **LEASE}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "dm_operator.main", "--port", str(self.port)],
                                         env=env, stdout=out, stderr=subprocess.STDOUT)

    def get(self, path: str, token: str = "") -> tuple[int, dict]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}",
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
        try:
            with urllib.request.urlopen(req, timeout=2) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            return exc.code, {}
        except OSError:
            return 0, {}

    def role(self) -> str:
        return self.get("/readyz")[1].get("role", "")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)


def wait(what: str, check, timeout: float = 60, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def test_least_privilege_and_a_standby_that_takes_over(apiserver: Testbed, namespace: str, tmp_path: Path):
    tb, ns = apiserver, namespace
    rbac = install_rbac(tb, ns)
    kubeconfig = sa_kubeconfig(tb, ns, tmp_path / "sa.kubeconfig")
    for name in ("op-a", "op-b"):  # the pods whose leader label the operator sets (no node runs them)
        tb.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
             "spec": {"serviceAccountName": "dm-operator", "automountServiceAccountToken": False,
                      "containers": [{"name": "operator", "image": "dm:test"}]}}))
    ops = {name: OperatorProcess(name, kubeconfig, ns, tmp_path) for name in ("op-a", "op-b")}
    try:
        a = wait("one instance to lead", lambda: next((op for op in ops.values() if op.role() == "leader"
                                                       and op.get("/healthz")[0] == 200), None))
        b = next(op for op in ops.values() if op is not a)
        wait("the other to stand by", lambda: b.role() == "standby")
        assert b.get("/readyz")[0] == 200, "a standby is Ready (a rollout waits for it)"
        tb.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(
            {"apiVersion": "dm.dev/v1alpha1", "kind": "DMCluster", "metadata": {"name": "c"},
             "spec": {"replicas": 1, "storage": {"size": "1Gi"}}}))
        tb.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(
            {"apiVersion": "dm.dev/v1alpha1", "kind": "Topic", "metadata": {"name": "t"},
             "spec": {"cluster": "c", "partitions": 1, "replicas": 1}}))
        wait("the StatefulSet", lambda: tb.kubectl("get", "statefulset", "c-broker", "-n", ns, check=False)
             .returncode == 0, 60)
        wait("the DMCluster's status", lambda: tb.kubectl_json("get", "dmcluster", "c", "-n", ns)
             .get("status", {}).get("conditions"), 60)
        wait("the Topic's condition", lambda: tb.kubectl_json("get", "topic", "t", "-n", ns)
             .get("status", {}).get("conditions"), 60)
        secret = tb.kubectl_json("get", "secret", "c-controller-token", "-n", ns)
        token = base64.b64decode(secret["data"]["token"]).decode()
        controller = f"/clusters/{ns}/c/v1/cluster"
        wait("the leader's controller", lambda: a.get(controller, token)[0] == 200)
        assert b.get(controller, token)[0] == 503, "a standby serves no controller"
        labels = {n: tb.kubectl_json("get", "pod", n, "-n", ns)["metadata"].get("labels", {}) for n in ops}
        assert labels[a.name].get("dm.dev/operator-leader") == "true"
        assert "dm.dev/operator-leader" not in labels[b.name]

        # The Topic's deletion waits for nothing (and the drift correction of a child).
        tb.kubectl("delete", "topic", "t", "-n", ns, "--wait=false")
        wait("the Topic gone", lambda: tb.kubectl("get", "topic", "t", "-n", ns, check=False).returncode != 0, 60)
        tb.kubectl("patch", "service", "c-bootstrap", "-n", ns, "--type=merge", "-p",
                   '{"spec":{"selector":{"app.kubernetes.io/name":"other"}}}')
        wait("the Service put back", lambda: tb.kubectl_json("get", "service", "c-bootstrap", "-n", ns)
             ["spec"]["selector"]["app.kubernetes.io/name"] == "dm", 30)

        # A clean stop releases the Lease: the standby leads at its next look.
        takeovers = {}
        stopped = time.monotonic()
        a.stop(signal.SIGTERM)
        holder = tb.kubectl_json("get", "lease", "dm-operator", "-n", ns)["spec"].get("holderIdentity") or ""
        assert not holder.startswith(a.name), "a leader that stops releases the Lease before it exits"
        wait("the standby serving the controller", lambda: b.get(controller, token)[0] == 200, 30, 0.02)
        takeovers["SIGTERM"] = time.monotonic() - stopped
        assert tb.kubectl_json("get", "pod", b.name, "-n", ns)["metadata"]["labels"].get(
            "dm.dev/operator-leader") == "true"

        # A leader that dies holds the Lease until it expires (a lease duration of no renewal).
        ops[a.name] = a = OperatorProcess(a.name, kubeconfig, ns, tmp_path)
        wait("the restarted instance to stand by", lambda: a.role() == "standby")
        killed = time.monotonic()
        b.stop(signal.SIGKILL)
        wait("the standby serving the controller", lambda: a.get(controller, token)[0] == 200, 60, 0.02)
        takeovers["SIGKILL"] = time.monotonic() - killed
        print(f"\ntakeover (standby serving the controller) after the leader's "
              f"{ {k: round(v, 2) for k, v in takeovers.items()} }; lease {LEASE}")
    finally:
        for op in ops.values():
            op.stop(signal.SIGKILL)
        for doc in rbac:
            if doc["kind"].startswith("Cluster"):
                tb.kubectl("delete", doc["kind"].lower(), doc["metadata"]["name"], check=False)
    logs = {name: op.log.read_text(errors="replace") for name, op in ops.items()}
    for name, text in logs.items():
        refused = [line for line in text.splitlines() if "forbidden" in line.lower()]
        assert not refused, f"{name} was refused by RBAC:\n" + "\n".join(refused[:10])
        assert "Traceback" not in text, f"{name} logged a traceback:\n{text[-4000:]}"
