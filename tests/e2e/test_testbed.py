"""The testbed itself: the real control plane schedules, the node agent runs pods as processes with
their volumes, env, DNS and probes, RBAC is enforced, chaos primitives work, teardown is clean."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from dm_testbed import cleanup
from dm_testbed.client import Testbed
from dm_testbed.settings import TestbedSettings
from support import (
    apply,
    container_status,
    get_json,
    get_or_none,
    pod_ready,
    run_script,
    script_pod,
    wait_pods_ready,
    wait_until,
)

BROKERS = """
apiVersion: v1
kind: Service
metadata: {name: brokers}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector: {app: brokers}
  ports: [{name: kafka, port: 9092}]
---
apiVersion: v1
kind: Service
metadata: {name: bootstrap}
spec:
  # The brokers here are standalone (no controller): the bootstrap Service reaches the first only.
  selector: {statefulset.kubernetes.io/pod-name: brokers-0}
  ports: [{name: kafka, port: 9092}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: brokers}
spec:
  serviceName: brokers
  replicas: 3
  podManagementPolicy: Parallel
  selector: {matchLabels: {app: brokers}}
  template:
    metadata: {labels: {app: brokers}}
    spec:
      terminationGracePeriodSeconds: 10
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule,
         labelSelector: {matchLabels: {app: brokers}}}
      containers:
      - name: broker
        image: dm
        args: [broker, --data-dir, /var/lib/dm/data, --host, 0.0.0.0, --port, "9092", --http-port, "8080",
               --advertised-host, "$(POD_NAME).brokers.$(POD_NAMESPACE).svc.cluster.local"]
        env:
        - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        - {name: POD_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
        ports: [{name: kafka, containerPort: 9092}, {name: http, containerPort: 8080}]
        readinessProbe: {httpGet: {path: /readyz, port: http}, periodSeconds: 1}
        livenessProbe: {tcpSocket: {port: kafka}, periodSeconds: 5, failureThreshold: 6}
        volumeMounts: [{name: data, mountPath: /var/lib/dm/data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
"""


def produce_and_consume(tb: Testbed, ns: str, bootstrap: str, topic: str, produce: list[str] | None) -> list[str]:
    """Produces `produce` (if any) to `topic` from a pod, then reads the whole topic back."""
    script = f"""
        import subprocess
        bootstrap, topic, values = {bootstrap!r}, {topic!r}, {produce!r}
        if values is not None:
            subprocess.run(["dm", "topics", "create", topic, "--bootstrap", bootstrap], check=True)
            subprocess.run(["dm", "produce", topic, "--bootstrap", bootstrap], input="\\n".join(values) + "\\n",
                           text=True, check=True)
        out = subprocess.run(["dm", "consume", topic, "--bootstrap", bootstrap, "--from-beginning",
                              "--exit-at-end"], capture_output=True, text=True, check=True).stdout
        print("RECORDS", out.split())
    """
    logs = run_script(tb, ns, script)
    line = next(x for x in logs.splitlines() if x.startswith("RECORDS"))
    return eval(line.removeprefix("RECORDS "))  # a list literal printed by the pod


def test_nodes_carry_zones_and_capacity(testbed: Testbed) -> None:
    nodes = get_json(testbed, "nodes")["items"]
    assert len(nodes) == testbed.settings.nodes
    zones = {n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in nodes}
    assert len(zones) == min(testbed.settings.nodes, len(testbed.settings.zones))
    for node in nodes:
        assert node["status"]["allocatable"]["cpu"] == testbed.settings.node_cpu
        assert any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])


def test_broker_statefulset_spreads_keeps_its_data_and_restarts_crashes(testbed: Testbed, namespace: str) -> None:
    started = time.monotonic()
    apply(testbed, BROKERS, namespace)
    pods = wait_pods_ready(testbed, namespace, "app=brokers", 3)
    print(f"StatefulSet create -> 3 Ready broker pods: {time.monotonic() - started:.1f}s")
    assert len({p["spec"]["nodeName"] for p in pods}) == 3, "one broker per node (zone spread)"

    # Through the ClusterIP Service (userspace proxy) and the headless names (DNS).
    assert produce_and_consume(testbed, namespace, "bootstrap:9092", "kept", ["a", "b", "c"]) == ["a", "b", "c"]

    # Deleted pods come back on the same node with the same claim and their data.
    before = {p["metadata"]["name"]: p for p in pods}
    for name in ("brokers-0", "brokers-1", "brokers-2"):
        testbed.delete_pod(namespace, name)
    after = {p["metadata"]["name"]: p for p in wait_pods_ready(testbed, namespace, "app=brokers", 3)}
    for name, pod in after.items():
        assert pod["metadata"]["uid"] != before[name]["metadata"]["uid"]
        assert pod["spec"]["nodeName"] == before[name]["spec"]["nodeName"], "local volume pins the pod to its node"
    claims = get_json(testbed, "pvc", "-n", namespace)["items"]
    assert sorted(c["metadata"]["name"] for c in claims) == ["data-brokers-0", "data-brokers-1", "data-brokers-2"]
    assert produce_and_consume(testbed, namespace, "brokers-0.brokers:9092", "kept", None) == ["a", "b", "c"]

    # A crash: the container is restarted by its restart policy, its previous log kept.
    testbed.kill_container(namespace, "brokers-1")
    pod = wait_until(lambda: (p := get_json(testbed, "pod", "brokers-1", "-n", namespace)) and pod_ready(p)
                     and container_status(p)["restartCount"] == 1 and p, 60, "brokers-1 restarted and ready")
    assert container_status(pod)["lastState"]["terminated"]["exitCode"] == 128 + signal.SIGKILL
    previous = testbed.kubectl("logs", "brokers-1", "-n", namespace, "--previous").stdout
    assert "DM_READY" in previous


def test_dns_service_links_and_in_cluster_api(testbed: Testbed, namespace: str) -> None:
    apply(testbed, BROKERS, namespace)
    wait_pods_ready(testbed, namespace, "app=brokers", 3)
    pods = {p["metadata"]["name"]: p["status"]["podIP"] for p in get_json(testbed, "pods", "-n", namespace)["items"]}
    bootstrap_ip = get_json(testbed, "svc", "bootstrap", "-n", namespace)["spec"]["clusterIP"]
    script = f"""
        import json, os, socket, ssl, urllib.request
        ns = {namespace!r}
        names = ["bootstrap", "bootstrap.{namespace}", "bootstrap.{namespace}.svc.cluster.local",
                 "brokers-0.brokers", "brokers-2.brokers.{namespace}.svc.cluster.local", "kubernetes.default",
                 "{pods['brokers-1'].replace('.', '-')}.{namespace}.pod.cluster.local"]
        out = {{n: socket.gethostbyname(n) for n in names}}
        out["headless"] = sorted({{a[4][0] for a in socket.getaddrinfo("brokers", 9092, proto=socket.IPPROTO_TCP)}})
        try:
            socket.gethostbyname("nothing-here")
            out["missing"] = "resolved"
        except socket.gaierror:
            out["missing"] = "NXDOMAIN"
        out["env"] = {{k: v for k, v in os.environ.items() if k.startswith(("BOOTSTRAP_", "KUBERNETES_"))}}
        sa = "/var/run/secrets/kubernetes.io/serviceaccount"
        ctx = ssl.create_default_context(cafile=sa + "/ca.crt")
        req = urllib.request.Request("https://kubernetes.default.svc/api/v1/namespaces/" + ns + "/pods",
                                     headers={{"Authorization": "Bearer " + open(sa + "/token").read()}})
        try:
            urllib.request.urlopen(req, context=ctx)
            out["list_pods"] = 200
        except urllib.error.HTTPError as exc:
            out["list_pods"] = exc.code
        print("RESULT", json.dumps(out))
    """
    result = json.loads(run_script(testbed, namespace, script).split("RESULT ", 1)[1])
    assert result["bootstrap"] == result[f"bootstrap.{namespace}"] == bootstrap_ip
    assert result[f"bootstrap.{namespace}.svc.cluster.local"] == bootstrap_ip
    assert result["brokers-0.brokers"] == pods["brokers-0"]
    assert result[f"brokers-2.brokers.{namespace}.svc.cluster.local"] == pods["brokers-2"]
    assert result["headless"] == sorted(pods.values())
    assert bootstrap_ip != pods["brokers-0"]
    assert result["kubernetes.default"] == testbed.settings.kubernetes_service_ip
    assert result["missing"] == "NXDOMAIN"
    assert result["env"]["BOOTSTRAP_SERVICE_HOST"] == bootstrap_ip
    assert result["env"]["KUBERNETES_SERVICE_HOST"] == testbed.settings.kubernetes_service_ip
    # The pod authenticated as its ServiceAccount (projected token), which may not list pods.
    assert result["list_pods"] == 403


def test_rbac_is_enforced_for_service_accounts(testbed: Testbed, namespace: str) -> None:
    apply(testbed, f"""
        apiVersion: v1
        kind: ServiceAccount
        metadata: {{name: reader}}
        ---
        apiVersion: rbac.authorization.k8s.io/v1
        kind: Role
        metadata: {{name: read-configmaps}}
        rules: [{{apiGroups: [""], resources: [configmaps], verbs: [get, list]}}]
        ---
        apiVersion: rbac.authorization.k8s.io/v1
        kind: RoleBinding
        metadata: {{name: reader}}
        subjects: [{{kind: ServiceAccount, name: reader, namespace: {namespace}}}]
        roleRef: {{kind: Role, name: read-configmaps, apiGroup: rbac.authorization.k8s.io}}
    """, namespace)
    script = f"""
        import ssl, urllib.request
        sa = "/var/run/secrets/kubernetes.io/serviceaccount"
        ctx = ssl.create_default_context(cafile=sa + "/ca.crt")
        token = open(sa + "/token").read()
        for resource in ("configmaps", "secrets"):
            req = urllib.request.Request(f"https://kubernetes.default.svc/api/v1/namespaces/{namespace}/{{resource}}",
                                         headers={{"Authorization": "Bearer " + token}})
            try:
                urllib.request.urlopen(req, context=ctx)
                print(resource, 200)
            except urllib.error.HTTPError as exc:
                print(resource, exc.code)
    """
    logs = run_script(testbed, namespace, script, service_account="reader")
    assert "configmaps 200" in logs and "secrets 403" in logs


def test_env_volumes_and_termination(testbed: Testbed, namespace: str) -> None:
    apply(testbed, """
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: settings}
        data: {greeting: hello, "app.properties": "a=1\\n"}
        ---
        apiVersion: v1
        kind: Secret
        metadata: {name: creds}
        stringData: {password: s3cret}
        ---
        apiVersion: v1
        kind: PersistentVolumeClaim
        metadata: {name: shared}
        spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 10Mi}}}
    """, namespace)
    writer = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "writer", "labels": {"app": "writer"}},
        "spec": {
            "terminationGracePeriodSeconds": 20,
            "containers": [{
                "name": "main", "image": "dm",
                "command": ["python", "-u", "-c", """
import json, os, signal, sys, time
out = {k: os.environ.get(k) for k in ("GREETING", "PASSWORD", "COMBINED", "MY_NODE", "MY_POD", "LITERAL")}
out["files"] = {p: open(p).read() for p in ("/etc/app/app.properties", "/etc/creds/password", "/etc/podinfo/name")}
try:
    open("/etc/app/new", "w")
    out["readonly"] = False
except OSError:
    out["readonly"] = True
print("RESULT", json.dumps(out), flush=True)
def stop(*_):
    with open("/data/events", "a") as f:
        f.write("sigterm\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
while True:
    time.sleep(1)
"""],
                "env": [
                    {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "greeting"}}},
                    {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
                    {"name": "MY_POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "MY_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "COMBINED", "value": "$(GREETING)-$(MY_POD)"},
                    {"name": "LITERAL", "value": "$$(GREETING)"},
                ],
                "lifecycle": {"preStop": {"exec": {"command": ["python", "-c",
                                                               "open('/data/events', 'a').write('prestop\\n')"]}}},
                "volumeMounts": [{"name": "settings", "mountPath": "/etc/app", "readOnly": True},
                                 {"name": "creds", "mountPath": "/etc/creds"},
                                 {"name": "podinfo", "mountPath": "/etc/podinfo"},
                                 {"name": "data", "mountPath": "/data"}],
            }],
            "volumes": [
                {"name": "settings", "configMap": {"name": "settings"}},
                {"name": "creds", "secret": {"secretName": "creds"}},
                {"name": "podinfo", "downwardAPI": {"items": [{"path": "name",
                                                               "fieldRef": {"fieldPath": "metadata.name"}}]}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "shared"}},
            ],
        },
    }
    apply(testbed, writer, namespace)
    pod = wait_pods_ready(testbed, namespace, "app=writer", 1)[0]
    logs = wait_until(lambda: "RESULT" in (out := testbed.kubectl("logs", "writer", "-n", namespace).stdout) and out,
                      30, "the writer's output")
    result = json.loads(logs.split("RESULT ", 1)[1])
    assert result["GREETING"] == "hello" and result["PASSWORD"] == "s3cret"
    assert result["COMBINED"] == "hello-writer" and result["LITERAL"] == "$(GREETING)"
    assert result["MY_NODE"] == pod["spec"]["nodeName"] and result["MY_POD"] == "writer"
    assert result["files"] == {"/etc/app/app.properties": "a=1\n", "/etc/creds/password": "s3cret",
                               "/etc/podinfo/name": "writer"}
    assert result["readonly"] is True

    # Graceful deletion: preStop first, then SIGTERM, which the process handles within its grace.
    started = time.monotonic()
    testbed.kubectl("delete", "pod", "writer", "-n", namespace, "--wait=true", timeout_s=60)
    assert time.monotonic() - started < 15, "the pod exited on SIGTERM instead of waiting for SIGKILL"
    reader = """
        print("EVENTS", open("/data/events").read().split())
    """
    logs = run_script(testbed, namespace, reader, claims={"shared": "/data"})
    # The reader mounts the same claim (scheduled on the claim's node).
    assert "EVENTS ['prestop', 'sigterm']" in logs, logs


def test_following_a_log_misses_nothing(testbed: Testbed, namespace: str) -> None:
    """`kubectl logs -f` joined while the container writes fast: every line arrives, once, in order,
    up to the last one written before it exited (test workloads report through their logs)."""
    script = """
        import sys, time
        for burst in range(600):
            sys.stdout.write("".join(f"LINE {burst * 500 + i}\\n" for i in range(500)))
            sys.stdout.flush()
            time.sleep(0.01)
        print("END", flush=True)
    """
    wait_until(lambda: get_or_none(testbed, "serviceaccount", "default", "-n", namespace), 30,
               "the namespace's default ServiceAccount")
    apply(testbed, script_pod("chatty", script), namespace)
    wait_until(lambda: "LINE " in testbed.kubectl("logs", "chatty", "-n", namespace, "--tail=1",
                                                 check=False).stdout, 60, "the writer under way")
    time.sleep(2)  # joined while the writer goes on: it writes during the (large) first answer
    follow = subprocess.Popen(["kubectl", "logs", "-f", "chatty", "-n", namespace], stdout=subprocess.PIPE,
                              text=True, env=testbed.env())
    wait_until(lambda: get_json(testbed, "pod", "chatty", "-n", namespace)["status"].get("phase") == "Succeeded",
               120, "the writer done")
    testbed.kubectl("delete", "pod", "chatty", "-n", namespace, "--wait=false")  # ends the stream
    out, _ = follow.communicate(timeout=60)
    lines = out.splitlines()
    assert lines[-1] == "END"
    numbers = [int(line.split()[1]) for line in lines[:-1]]
    assert numbers == list(range(300_000)), f"{300_000 - len(numbers)} lines missing or out of order"


def test_unknown_image_fails_like_a_pull_error(testbed: Testbed, namespace: str) -> None:
    apply(testbed, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
                    "spec": {"containers": [{"name": "web", "image": "nginx:1.25"}]}}, namespace)

    def waiting() -> dict | None:
        state = container_status(get_json(testbed, "pod", "web", "-n", namespace)).get("state", {})
        return state.get("waiting") if state.get("waiting", {}).get("reason") in ("ErrImagePull",
                                                                                 "ImagePullBackOff") else None

    reason = wait_until(waiting, 30, "a pull error on an unmapped image")
    assert "nginx:1.25" in reason["message"] and "not mapped" in reason["message"]


def test_liveness_failure_restarts_and_unready_pod_leaves_endpoints(testbed: Testbed, namespace: str) -> None:
    apply(testbed, """
        apiVersion: v1
        kind: Pod
        metadata: {name: flaky, labels: {app: flaky}}
        spec:
          containers:
          - name: main
            image: dm
            command: [python, -u, -c, "import os, time; open('/tmp/alive', 'w'); time.sleep(4);
                                       os.remove('/tmp/alive'); time.sleep(3600)"]
            livenessProbe:
              exec: {command: [python, -c, "open('/tmp/alive')"]}
              periodSeconds: 1
              failureThreshold: 2
    """, namespace)
    wait_until(lambda: container_status(get_json(testbed, "pod", "flaky", "-n", namespace)).get("restartCount", 0) >= 1,
               60, "a liveness restart")
    events = testbed.kubectl("get", "events", "-n", namespace, "--field-selector", "involvedObject.name=flaky").stdout
    assert "Liveness probe failed" in events, events


def test_network_cut_and_heal(testbed: Testbed, namespace: str) -> None:
    apply(testbed, BROKERS.replace("replicas: 3", "replicas: 1"), namespace)
    wait_pods_ready(testbed, namespace, "app=brokers", 1)
    probe = """
        import socket, sys
        try:
            socket.create_connection(("brokers-0.brokers", 9092), timeout=2).close()
            print("REACHABLE")
        except OSError as exc:
            print("UNREACHABLE", exc)
    """
    assert "REACHABLE" in run_script(testbed, namespace, probe).split()
    testbed.cut_network(namespace, "brokers-0")
    try:
        assert "UNREACHABLE" in run_script(testbed, namespace, probe)
        # Its readiness probe fails too: the pod leaves the Service's endpoints.
        wait_until(lambda: not pod_ready(get_json(testbed, "pod", "brokers-0", "-n", namespace)), 30,
                   "brokers-0 to turn unready while cut off")
    finally:
        testbed.heal_network(namespace, "brokers-0")
    assert "REACHABLE" in run_script(testbed, namespace, probe).split()
    wait_pods_ready(testbed, namespace, "app=brokers", 1)


def test_force_delete_and_node_stop(testbed: Testbed, namespace: str) -> None:
    apply(testbed, BROKERS, namespace)
    pods = {p["metadata"]["name"]: p for p in wait_pods_ready(testbed, namespace, "app=brokers", 3)}

    # Forced deletion: the object is gone at once; the StatefulSet creates the pod again.
    old_uid = pods["brokers-0"]["metadata"]["uid"]
    testbed.delete_pod(namespace, "brokers-0", force=True)
    wait_until(lambda: (p := get_or_none(testbed, "pod", "brokers-0", "-n", namespace)) and
               p["metadata"]["uid"] != old_uid and pod_ready(p), 60, "brokers-0 recreated after a forced delete")

    # A node loses power: its pods' processes die, the node controller marks it NotReady.
    node = pods["brokers-2"]["spec"]["nodeName"]
    victim = next(p for p in testbed.status()["pods"] if p["namespace"] == namespace and p["name"] == "brokers-2")
    pid = victim["containers"]["broker"]["pid"]
    testbed.stop_node(node)
    try:
        assert not Path(f"/proc/{pid}/cmdline").exists() or not Path(f"/proc/{pid}/cmdline").read_bytes()
        wait_until(lambda: any(c["type"] == "Ready" and c["status"] != "True"
                               for c in get_json(testbed, "node", node)["status"]["conditions"]), 60,
                   f"{node} NotReady")
    finally:
        testbed.start_node(node)
    wait_until(lambda: any(c["type"] == "Ready" and c["status"] == "True"
                           for c in get_json(testbed, "node", node)["status"]["conditions"]), 60, f"{node} Ready")
    wait_pods_ready(testbed, namespace, "app=brokers", 3)


def test_teardown_leaves_nothing_also_after_an_interrupted_run(testbed: Testbed, tmp_path) -> None:
    """A second, independent testbed (own run directory, ports, networks): killed with SIGKILL it
    leaves namespaces and links behind, which the next start removes; a normal stop leaves nothing."""
    other = TestbedSettings(run_dir=tmp_path / "tb", nodes=1, apiserver_port=26443, etcd_port=22379,
                            kubelet_port=20250, bridge="dmtc0", prefix="dmtc", pod_cidr="10.245.0.0/16",
                            service_cidr="10.97.0.0/16", cache_dir=testbed.settings.cache_dir)
    tb = Testbed.start(other)
    try:
        apply(tb, BROKERS.replace("replicas: 3", "replicas: 1"), "default")
        wait_pods_ready(tb, "default", "app=brokers", 1)
        os.kill(cleanup.supervisor_pid(other), signal.SIGKILL)
        left = wait_until(lambda: (found := cleanup.leftovers(other)) and "processes" not in found and found, 20,
                          "the control plane to die with its supervisor")
        assert left.get("netns") and left.get("links"), left
    finally:
        tb = Testbed.start(other)  # cleans up the stale run first
    apply(tb, BROKERS.replace("replicas: 3", "replicas: 1"), "default")
    wait_pods_ready(tb, "default", "app=brokers", 1)
    assert tb.stop() == {}
