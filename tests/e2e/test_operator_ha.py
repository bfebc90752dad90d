"""The operator with a standby (the chart runs two): the leader's pod deleted — gracefully (it stops
its controllers and releases the Lease) and forcibly (SIGKILL: the Lease expires) — while an
idempotent acks=all producer writes. Measured and printed: from the deletion to the first answer of
the new leader's controller through the operator Service (a prober pod asks it every 50 ms).
Invariants: the standby takes over every time, the brokers go on acknowledging writes while no
controller answers, and no acknowledged record is lost."""

from __future__ import annotations

import base64
import time

import pytest
from dm import (
    OPERATOR_NAMESPACE,
    Workload,
    bootstrap,
    create_cluster,
    leader_operator_pods,
    median_ms,
    topic,
    verdict,
    wait_topic_ready,
)
from measurements import note
from support import apply, get_json, wait_until

pytestmark = [pytest.mark.timeout(1200), pytest.mark.e2e_exclusive]  # it deletes the operator's pods
ROUNDS = {"deleted": 3, "forced": 2}


def operator_pods(sub) -> list[dict]:
    return get_json(sub, "pods", "-n", OPERATOR_NAMESPACE, "-l", "app.kubernetes.io/component=operator")["items"]


def two_ready(sub) -> bool:
    pods = [p for p in operator_pods(sub) if not p["metadata"].get("deletionTimestamp")]
    return len(pods) == 2 and all(c.get("ready") for p in pods for c in p["status"].get("containerStatuses", []))


def leader_pod(sub) -> str | None:
    live = [p["metadata"]["name"] for p in leader_operator_pods(sub) if not p["metadata"].get("deletionTimestamp")]
    return live[0] if len(live) == 1 else None


def probes(prober: Workload) -> list[tuple[float, int, str]]:
    out = []
    for line in list(prober.lines):
        if line.startswith("PROBE "):
            _, at, status, incarnation = line.split()
            out.append((float(at), int(status), incarnation))
    return out


def next_controller(prober: Workload, after: float, old: str) -> tuple[float, int, str] | None:
    """The first answer of a controller other than `old`, after `after`."""
    return next((p for p in probes(prober) if p[0] > after and p[1] == 200 and p[2] != old), None)


def test_the_standby_operator_takes_over_while_brokers_keep_serving(e2e_namespace, operator):
    sub, ns = operator, e2e_namespace
    create_cluster(sub, ns)
    apply(sub, topic("ha", partitions=3, replicas=3, config={"min.insync.replicas": "2"}), ns)
    wait_topic_ready(sub, ns, "ha")
    wait_until(lambda: two_ready(sub) and leader_pod(sub), 180, "two operator pods, one leading")
    token = base64.b64decode(get_json(sub, "secret", "demo-controller-token", "-n", ns)["data"]["token"]).decode()
    url = f"http://dm-operator.{OPERATOR_NAMESPACE}.svc.cluster.local:9990/clusters/{ns}/demo/v1/cluster"
    prober = Workload(sub, ns, "prober.py", {"URL": url, "TOKEN": token})
    env = {"BOOTSTRAP": bootstrap(ns), "TOPIC": "ha", "PARTITIONS": 3, "RATE": 100}
    producer = Workload(sub, ns, "producer.py", env)
    producer.wait_for("ACK", 90)
    wait_until(lambda: any(status == 200 for _, status, _ in probes(prober)), 60, "the controller answering")

    takeovers: dict[str, list[float]] = {how: [] for how in ROUNDS}
    windows: list[tuple[float, float]] = []
    for how, count in ROUNDS.items():
        for _ in range(count):
            wait_until(lambda: two_ready(sub) and leader_pod(sub), 240, "two Ready operator pods, one leading")
            time.sleep(2)
            answered = [p for p in probes(prober) if p[1] == 200]
            old = answered[-1][2]
            victim = leader_pod(sub)
            at = time.time()
            force = ["--grace-period=0", "--force"] if how == "forced" else []
            sub.kubectl("delete", "pod", victim, "-n", OPERATOR_NAMESPACE, "--wait=false", *force)
            new = wait_until(lambda at=at, old=old: next_controller(prober, at, old), 120,
                             f"another controller answering after {victim} was {how}")
            takeovers[how].append(new[0] - at)
            windows.append((at, new[0]))
    time.sleep(3)
    produced = producer.stop()
    prober.stop()
    reader = Workload(sub, ns, "consumer.py", {**env, "UNTIL_EMPTY": 10})
    reader.wait_for("REC", 90)
    result = verdict(produced, reader.stop())
    for how, values in takeovers.items():
        note(f"[{sub.name}] operator leader pod {how}: -> the standby's controller answering {median_ms(values)}")
    note(f"[{sub.name}] {result.summary()}")
    assert result.ok, f"{result.summary()}: lost {result.lost[:10]}"
    # While no controller answered (longest after a SIGKILL: the Lease expires), writes were acknowledged.
    longest = max(windows, key=lambda w: w[1] - w[0])
    during = [a for a in result.acks if longest[0] < a[4] < longest[1]]
    assert during, f"no write was acknowledged during the {longest[1] - longest[0]:.1f} s without a controller"
    wait_until(lambda: two_ready(sub), 240, "two Ready operator pods again")
