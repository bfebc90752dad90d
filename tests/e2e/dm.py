"""dm on Kubernetes, as the scenarios use it: the operator from the Helm chart, DMClusters and
Topics by kubectl, load and verification from client pods, and the checks on what they saw."""

from __future__ import annotations

import os
import statistics
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from substrate import REPO, Substrate
from support import apply, env_list, get_json, get_or_none, mount_secrets, pod_ready, restricted, wait_until

CHART = REPO / "charts" / "dm-cluster"
WORKLOADS = Path(__file__).parent / "workloads"
OPERATOR_NAMESPACE = "dm-system"
WATCHED = "e2e-*"  # the shared operator serves the scenario namespaces only


def install_operator(sub: Substrate, release: str = "dm", namespace: str = OPERATOR_NAMESPACE,
                     extra: tuple[str, ...] = ()) -> None:
    sub.helm("upgrade", "--install", release, str(CHART), "-n", namespace, "--create-namespace", "--wait",
             "--timeout", "5m", "--set", f"image.repository={sub.image_repository}",
             "--set", f"image.tag={sub.image_tag}", "--set", "cluster.enabled=false",
             "--set", "watch.allNamespaces=true", "--set", f"watch.namespaces={{{WATCHED}}}", *extra)
    wait_until(lambda: operator_ready(sub, namespace), 120, "the operator leading")
    time.sleep(3)
    pods = get_json(sub, "pods", "-n", namespace, "-l", "app.kubernetes.io/component=operator")["items"]
    restarted = [p["metadata"]["name"] for p in pods
                 if any(c.get("restartCount", 0) for c in p["status"].get("containerStatuses", []))]
    assert operator_ready(sub, namespace) and not restarted, "the operator did not stay up:\n" + sub.kubectl(
        "logs", "-n", namespace, "-l", "app.kubernetes.io/component=operator", "--tail", "50", check=False).stdout


def operator_ready(sub: Substrate, namespace: str) -> bool:
    """An instance leads (its pod carries the leader label the Service selects) and is Running and Ready:
    the clusters' controllers are served. (A standby alone does not count: it serves no controller.)"""
    pods = leader_operator_pods(sub, namespace)
    return any(p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp") and
               all(c.get("ready") for c in p["status"].get("containerStatuses", [])) for p in pods)


# -- DMClusters and Topics ---------------------------------------------------------------------------


def dmcluster(name: str = "demo", replicas: int = 3, config: dict | None = None, **spec: Any) -> dict:
    return {"apiVersion": "dm.dev/v1alpha1", "kind": "DMCluster", "metadata": {"name": name},
            "spec": {"replicas": replicas, "storage": {"size": "1Gi"}, "config": config or {}, **spec}}


def topic(name: str, partitions: int = 3, replicas: int = 3, cluster: str = "demo",
          config: dict | None = None, **spec: Any) -> dict:
    return {"apiVersion": "dm.dev/v1alpha1", "kind": "Topic", "metadata": {"name": name},
            "spec": {"cluster": cluster, "partitions": partitions, "replicas": replicas, "config": config or {},
                     **spec}}


def condition(obj: dict | None, kind: str = "Ready") -> dict:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions", []) if c["type"] == kind), {})


def wait_cluster_ready(sub: Substrate, ns: str, name: str = "demo", replicas: int = 3,
                       timeout_s: float = 240) -> dict:
    def ready() -> dict | None:
        obj = get_or_none(sub, "dmcluster", name, "-n", ns)
        c = condition(obj)
        ok = c.get("status") == "True" and obj["status"].get("readyReplicas") == replicas
        return obj if ok and c.get("observedGeneration") == obj["metadata"]["generation"] else None

    return wait_until(ready, timeout_s, f"DMCluster {ns}/{name} Ready with {replicas} brokers", interval_s=1)


def create_cluster(sub: Substrate, ns: str, name: str = "demo", replicas: int = 3, **kw: Any) -> dict:
    apply(sub, dmcluster(name, replicas, **kw), ns)
    return wait_cluster_ready(sub, ns, name, replicas)


def topic_status(sub: Substrate, ns: str, name: str) -> dict:
    return (get_or_none(sub, "topic", name, "-n", ns) or {}).get("status") or {}


def wait_topic_ready(sub: Substrate, ns: str, name: str, timeout_s: float = 90) -> dict:
    def ready() -> dict | None:
        obj = get_or_none(sub, "topic", name, "-n", ns)
        c = condition(obj)
        return obj if c.get("status") == "True" and c.get("observedGeneration") == obj["metadata"]["generation"] \
            else None

    return wait_until(ready, timeout_s, f"Topic {ns}/{name} Ready", interval_s=0.5)


def leaders(status: dict) -> dict[int, int]:
    return {p["partition"]: p["leader"] for p in status.get("partitions", [])}


def fully_in_sync(status: dict) -> bool:
    parts = status.get("partitions", [])
    return bool(parts) and all(p["leader"] >= 0 and sorted(p["isr"]) == sorted(p["replicas"]) for p in parts)


# curl and jq on Debian, for the HTTP client pods (scripts/kind/images.sh builds it, cluster.sh loads it)
CURL_IMAGE = os.environ.get("DM_CURL_IMAGE", "dm.local/curl:e2e")
# Debian's prometheus package (testbed/kind/images/prometheus.Dockerfile), for tests/e2e/test_monitoring.py
PROMETHEUS_IMAGE = os.environ.get("DM_PROMETHEUS_IMAGE", "dm.local/prometheus:e2e")


def bootstrap(ns: str, cluster: str = "demo") -> str:
    return f"{cluster}-bootstrap.{ns}.svc.cluster.local:9092"


def broker_pods(sub: Substrate, ns: str) -> list[dict]:
    return get_json(sub, "pods", "-n", ns, "-l", "app.kubernetes.io/component=broker")["items"]


def brokers_ready(sub: Substrate, ns: str, count: int = 3) -> bool:
    pods = broker_pods(sub, ns)
    return len(pods) == count and all(pod_ready(p) for p in pods)


def whole(sub: Substrate, ns: str, topic_name: str) -> bool:
    """Three Ready brokers, and every replica of the topic in its ISR."""
    return brokers_ready(sub, ns) and fully_in_sync(topic_status(sub, ns, topic_name))


def leader_operator_pods(sub: Substrate, namespace: str = OPERATOR_NAMESPACE) -> list[dict]:
    """The pods carrying the operator's leader label (the one its Service selects)."""
    return get_json(sub, "pods", "-n", namespace, "-l", "dm.dev/operator-leader=true")["items"]


def leading_operator_nodes(sub: Substrate) -> set[str]:
    """The nodes the leading operator's pod runs on (a scenario that stops a node spares them unless it
    means to lose the operator: tests/e2e/test_operator_ha.py)."""
    return {p["spec"]["nodeName"] for p in leader_operator_pods(sub)}


# -- client pods ---------------------------------------------------------------------------------------


# Client pods run on the control plane node, so that stopping a worker node (chaos) never takes the
# clients that judge the outcome down with it. (Kubernetes < 1.24 labels and taints it "master".)
ON_CONTROL_PLANE = {
    "tolerations": [{"key": f"node-role.kubernetes.io/{role}", "operator": "Exists", "effect": "NoSchedule"}
                    for role in ("master", "control-plane")],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": f"node-role.kubernetes.io/{role}", "operator": "Exists"}]}
        for role in ("master", "control-plane")]}}},
}


class Workload:
    """A pod running tests/e2e/workloads/<script> with the dm image's python, its output followed
    from the start (`kubectl logs -f`), stopped by deleting the pod: SIGTERM, which the workloads
    handle by finishing their work, within the pod's grace period. `secrets` mounts Secrets (name →
    directory); an env value may be a SecretKey."""

    def __init__(self, sub: Substrate, ns: str, script: str, env: dict[str, Any], grace_s: int = 120,
                 secrets: dict[str, str] | None = None, image: str | None = None) -> None:
        import threading

        self.sub, self.ns = sub, ns
        stem, _, kind = script.rpartition(".")
        self.name = f"{stem.replace('_', '-')}-{uuid.uuid4().hex[:6]}"
        # a .sh workload runs with sh from `image` (the curl image), a .py one with the dm image's python
        command = ["sh", f"/w/{script}"] if kind == "sh" else ["python", "-u", f"/w/{script}"]
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": self.name},
              "data": {script: (WORKLOADS / script).read_text()}}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": self.name, "labels": {"app": "dm-e2e-client"}},
               "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": grace_s, **ON_CONTROL_PLANE,
                        "containers": [{"name": "main", "image": image or sub.image,
                                        "command": command,
                                        "env": env_list({**env, "DM_GRACE_S": grace_s}),
                                        "volumeMounts": [{"name": "w", "mountPath": "/w"}]}],
                        "volumes": [{"name": "w", "configMap": {"name": self.name}}]}}
        apply(sub, [cm, restricted(mount_secrets(pod, secrets))], ns)
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        import subprocess

        wait_until(lambda: (get_or_none(self.sub, "pod", self.name, "-n", self.ns) or {}).get("status", {})
                   .get("phase") in ("Running", "Succeeded", "Failed"), 120, f"{self.name} running")
        proc = subprocess.Popen(["kubectl", "logs", "-f", self.name, "-n", self.ns], stdout=subprocess.PIPE,
                                text=True, env=self.sub.env())
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append(line.rstrip("\n"))
        proc.wait()

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    @property
    def kept(self) -> Path:
        return Path(os.environ.get("DM_E2E_WORKLOADS", "/tmp/dm-e2e-workloads")) / self.ns / f"{self.name}.log"

    def wait_for(self, text: str, timeout_s: float, since: int = 0) -> None:
        """Until a line from the `since`-th on contains `text`. Lines are scanned once each (a busy
        producer prints hundreds a second; a window of the last ones can miss the one awaited)."""
        cursor = [since]

        def found() -> bool:
            end = len(self.lines)
            hit = any(text in line for line in self.lines[cursor[0]:end])
            cursor[0] = end
            return hit

        wait_until(found, timeout_s, f"{text!r} from {self.name}")

    def stop(self, timeout_s: float = 240) -> str:
        """SIGTERM; returns everything it printed once it has exited (also kept in a file, `kept`,
        since the pod and its log go with the test's namespace)."""
        self.sub.kubectl("delete", "pod", self.name, "-n", self.ns, "--wait=false")
        self._thread.join(timeout_s)
        self.kept.parent.mkdir(parents=True, exist_ok=True)
        self.kept.write_text(self.output + "\n")
        assert not self._thread.is_alive(), f"{self.name} did not finish within {timeout_s}s"
        # librdkafka's own log lines ("%7|..." with `debug` set) may follow the workload's last line
        own = [line for line in self.lines if not line.startswith("%")]
        assert any(line.startswith("DONE") for line in own[-5:]), \
            f"{self.name} did not finish its work:\n" + "\n".join(own[-20:])
        return self.output


@dataclass
class Load:
    env: dict[str, Any]
    producer: Workload
    consumer: Workload


def start_load(sub: Substrate, ns: str, partitions: int = 3, consumer_env: dict[str, Any] | None = None) -> Load:
    """The Topic "load" (RF 3, min.insync.replicas 2) of cluster "demo" fully in sync, then an idempotent
    acks=all producer at 150 records a second and a consumer following it, in client pods; returns once the
    producer has its first acknowledgement."""
    apply(sub, topic("load", partitions=partitions, replicas=3, config={"min.insync.replicas": "2"}), ns)
    wait_topic_ready(sub, ns, "load")
    wait_until(lambda: fully_in_sync(topic_status(sub, ns, "load")), 60, "load in sync")
    env = {"BOOTSTRAP": bootstrap(ns), "TOPIC": "load", "PARTITIONS": partitions, "RATE": 150}
    producer = Workload(sub, ns, "producer.py", env)
    consumer = Workload(sub, ns, "consumer.py", {**env, "UNTIL_EMPTY": 10, **(consumer_env or {})})
    producer.wait_for("ACK", 90)
    return Load(env, producer, consumer)


# -- what the clients saw ---------------------------------------------------------------------------------


# librdkafka acknowledges a record without an offset when it infers it was written: a request
# failed with an uncertain outcome (a timeout) and a later one of the same partition succeeded
# (an "implicit ack"). Such a record is looked up by its value instead.
UNKNOWN_OFFSET = -1


@dataclass
class Verdict:
    acked: int
    read: int
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    reordered: list[str] = field(default_factory=list)
    acks: list[tuple[int, int, int, float, float]] = field(default_factory=list)  # partition, offset, seq, sent, at
    positions: dict[int, str] = field(default_factory=dict)  # the consumer's last word on each partition

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.reordered)

    def summary(self) -> str:
        without_offset = sum(1 for _, off, _, _, _ in self.acks if off == UNKNOWN_OFFSET)
        summary = (f"acknowledged {self.acked} ({without_offset} without an offset), read {self.read}, lost "
                   f"{len(self.lost)}, duplicated {len(self.duplicated)}, reordered {len(self.reordered)}")
        if self.lost:  # read too little, or was it gone: where the consumer stood, in CI's log too
            partitions = sorted({int(lost.split(":")[0]) for lost in self.lost})
            stood = [self.positions[p] for p in partitions if p in self.positions]
            summary += f" (first lost {self.lost[:3]}; " + "; ".join(stood[:5]) + ")"
        return summary


def parse_acks(producer_log: str) -> list[tuple[int, int, int, float, float]]:
    """The producer workload's ACK lines: (partition, offset, seq, sent, acknowledged at)."""
    acks = []
    for line in producer_log.splitlines():
        if line.startswith("ACK "):
            _, p, off, seq, sent, at = line.split()
            acks.append((int(p), UNKNOWN_OFFSET if off == "None" else int(off), int(seq), float(sent), float(at)))
    return acks


def verdict(producer_log: str, consumer_log: str) -> Verdict:
    """Every acknowledged record is in the topic, once, at the offset it was acknowledged at (or
    anywhere in its partition when acknowledged without one), and each partition holds its records
    in the order they were produced."""
    acks = parse_acks(producer_log)
    records: dict[tuple[int, int], str] = {}
    seen: dict[str, int] = {}
    duplicated = []
    order: dict[int, list[int]] = {}
    for line in consumer_log.splitlines():
        if line.startswith("REC "):
            _, p, off, value = line.split(maxsplit=3)
            records[(int(p), int(off))] = value
            seen[value] = seen.get(value, 0) + 1
            if seen[value] == 2:
                duplicated.append(value)
            order.setdefault(int(p), []).append(int(value.split(":")[1]))
    present = {(p, value) for (p, _), value in records.items()}
    lost = [f"{p}:{seq}@{off}" for p, off, seq, _, _ in acks
            if ((p, f"{p}:{seq}") not in present if off == UNKNOWN_OFFSET else records.get((p, off)) != f"{p}:{seq}")]
    reordered = [f"partition {p}" for p, seqs in order.items() if seqs != sorted(seqs)]
    positions = {int(line.split()[2].rstrip(":")): line[2:] for line in consumer_log.splitlines()
                 if line.startswith("# partition ")}
    return Verdict(len(acks), len(records), lost, duplicated, reordered, acks, positions)


def first_ack_after(v: Verdict, instant: float, partition: int) -> float | None:
    """Seconds from `instant` to the acknowledgement of the first record of `partition` (the one whose
    leader was hit; the others go on unaffected) produced after it."""
    later = [at for p, _, _, sent, at in v.acks if p == partition and sent > instant]
    return min(later) - instant if later else None


def median_ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f} ms (max {max(values) * 1000:.0f} ms, {len(values)} rounds)" \
        if values else "n/a"


def now() -> float:
    return time.time()


class TopicWatcher:
    """Every version of a Topic's status as the API server sends it, with the time it arrived
    (a watch in a thread), so tests can tell when a leader change reached the status."""

    def __init__(self, sub: Substrate, ns: str, name: str) -> None:
        import threading

        from kubernetes import client, config, watch

        self.seen: list[tuple[float, dict[int, int]]] = []
        self._stop = threading.Event()
        api_client = config.new_client_from_config(str(sub.kubeconfig))
        self._api = client.CustomObjectsApi(api_client)
        self._watch = watch.Watch()
        self._args = ("dm.dev", "v1alpha1", ns, "topics")
        self._name = name
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for event in self._watch.stream(self._api.list_namespaced_custom_object, *self._args,
                                                field_selector=f"metadata.name={self._name}", timeout_seconds=30):
                    status = event["object"].get("status") or {}
                    self.seen.append((time.time(), leaders(status)))
                    if self._stop.is_set():
                        return
            except Exception:  # the watch expired or the API server hiccupped: watch again
                time.sleep(0.2)

    def first_leader_change(self, partition: int, old: int, after: float) -> float | None:
        """When the status first named a leader other than `old` for `partition`, after `after`."""
        for at, current in self.seen:
            if at >= after and current.get(partition, old) not in (old, -1):
                return at
        return None

    def stop(self) -> None:
        self._stop.set()
        self._watch.stop()
