"""Pod chaos under load (RF=3, min.insync.replicas=2, an idempotent acks=all producer and a
consumer, both in pods): the leader's pod deleted, 10 rounds (DM_E2E_CHAOS_ROUNDS for more); then
forced deletions, the broker container killed through its node's containerd, the leader's node
container stopped and started again, and the operator pod killed mid-load. Invariants: no
acknowledged record lost, none duplicated, none reordered; the Topic's status names the new leader
every round. Measured and printed: each fault -> new leader in the status, and -> first acknowledged
write of a record produced after it."""

from __future__ import annotations

import os
import time

import pytest
from dm import (
    OPERATOR_NAMESPACE,
    TopicWatcher,
    Workload,
    create_cluster,
    first_ack_after,
    leader_operator_pods,
    leaders,
    leading_operator_nodes,
    median_ms,
    operator_ready,
    start_load,
    topic_status,
    verdict,
    whole,
)
from measurements import note
from support import get_json, get_or_none, wait_until

pytestmark = [pytest.mark.timeout(1800), pytest.mark.e2e_exclusive]  # it stops a node and kills the operator

# Each round waits for the replaced broker to be Ready and back in every ISR (about 20 s on this 2-core
# machine); the hosted CI workflow runs 20 deletion rounds.
ROUNDS = int(os.environ.get("DM_E2E_CHAOS_ROUNDS", "10"))
FORCED = int(os.environ.get("DM_E2E_FORCED_ROUNDS", "2"))
CRASHES = int(os.environ.get("DM_E2E_CRASH_ROUNDS", "2"))
NODE_STOPS = int(os.environ.get("DM_E2E_NODE_ROUNDS", "1"))
PARTITIONS = 3


def test_pod_chaos_under_load_loses_nothing(e2e_namespace, operator):
    sub, ns = operator, e2e_namespace
    create_cluster(sub, ns)
    load = start_load(sub, ns, PARTITIONS)
    env, producer, consumer = load.env, load.producer, load.consumer
    watcher = TopicWatcher(sub, ns, "load")
    kills: dict[str, list[tuple[float, int]]] = {"deleted": [], "forced": [], "crashed": [], "node stopped": []}
    status_lag: dict[str, list[float]] = {how: [] for how in kills}
    stopped: list[str] = []

    def one_round(how: str, partition: int) -> None:
        wait_until(lambda: whole(sub, ns, "load"), 240, "three Ready brokers in every ISR before the next round")
        old = leaders(topic_status(sub, ns, "load"))[partition]
        pod = f"demo-broker-{old}"
        at = time.time()
        if how == "deleted":
            sub.kubectl("delete", "pod", pod, "-n", ns, "--wait=false")
        elif how == "forced":
            sub.kubectl("delete", "pod", pod, "-n", ns, "--grace-period=0", "--force", "--wait=false")
        elif how == "crashed":
            sub.chaos.kill_container(ns, pod, "broker")
        else:
            node = get_json(sub, "pod", pod, "-n", ns)["spec"]["nodeName"]
            sub.chaos.stop_node(node)
            stopped.append(node)
        kills[how].append((at, partition))
        try:
            wait_until(lambda: leaders(topic_status(sub, ns, "load")).get(partition) not in (old, -1), 60,
                       f"the status to name a new leader of load-{partition} after {pod} was {how}")
        finally:
            if stopped:
                sub.chaos.start_node(stopped.pop())
        seen = watcher.first_leader_change(partition, old, at)
        if seen is not None:
            status_lag[how].append(seen - at)

    for i in range(ROUNDS):
        one_round("deleted", i % PARTITIONS)
    for i in range(FORCED):
        one_round("forced", i % PARTITIONS)
    for i in range(CRASHES):
        one_round("crashed", i % PARTITIONS)
    for _ in range(NODE_STOPS):
        # A node whose broker leads a partition, but which runs neither the leading operator (whose
        # controller would go with it: tests/e2e/test_operator_ha.py has that case) nor the clients (which
        # live on the control plane node). The standby operator may be on it.
        wait_until(lambda: whole(sub, ns, "load"), 240, "three Ready brokers in every ISR before a node stops")
        operator_nodes = leading_operator_nodes(sub)
        led_elsewhere = [p for p, leader in leaders(topic_status(sub, ns, "load")).items()
                         if get_json(sub, "pod", f"demo-broker-{leader}", "-n", ns)["spec"]["nodeName"]
                         not in operator_nodes]
        assert led_elsewhere, f"every partition is led from the operator's node ({operator_nodes})"
        one_round("node stopped", led_elsewhere[0])

    # The leading operator's pod killed while the load runs: brokers keep serving their leaders meanwhile,
    # and the standby takes over once the Lease expires (tests/e2e/test_operator_ha.py measures it).
    wait_until(lambda: whole(sub, ns, "load"), 240, "a healthy cluster before the operator is killed")
    operator_pod = wait_until(lambda: leader_operator_pods(sub), 60,
                              "the leading operator's pod")[0]["metadata"]["name"]
    sub.kubectl("delete", "pod", operator_pod, "-n", OPERATOR_NAMESPACE, "--grace-period=0", "--force")
    time.sleep(5)
    wait_until(lambda: operator_ready(sub, OPERATOR_NAMESPACE), 120, "the operator back")
    wait_until(lambda: whole(sub, ns, "load"), 120, "the cluster healthy under the new operator")
    one_round("deleted", 0)  # and it fails over again

    time.sleep(3)  # load after the last round
    produced = producer.stop()
    followed = consumer.stop()
    watcher.stop()
    # Everything read back once more, after the fact: whether every acknowledged record is in the
    # topic (data safety) and whether the consumer that followed the failovers saw them all (it
    # recovers from every leader change) are separate questions, and a failure says which.
    reader = Workload(sub, ns, "consumer.py", {**env, "UNTIL_EMPTY": 10})
    reader.wait_for("REC", 90)
    result = verdict(produced, reader.stop())
    live = verdict(produced, followed)
    outputs = f"(outputs kept in {producer.kept.parent})"
    first_acks = {how: [x for x in (first_ack_after(result, t, p) for t, p in times) if x is not None]
                  for how, times in kills.items()}
    note(f"[{sub.name}] {result.summary()}")
    for how, values in first_acks.items():
        note(f"[{sub.name}] leader {how}: -> new leader in the Topic status {median_ms(status_lag[how])}; "
              f"-> first acknowledged write produced after it {median_ms(values)}")
    assert result.acked > 1000
    assert result.ok, f"{result.summary()}: lost {result.lost[:10]} duplicated {result.duplicated[:10]} " \
                      f"{result.reordered} {outputs}"
    assert live.ok, f"the consumer that followed the failovers: {live.summary()}: missed {live.lost[:10]} " \
                    f"duplicated {live.duplicated[:10]} {live.reordered} {outputs}"
    events = sub.kubectl("get", "events", "-n", ns, "--field-selector", "involvedObject.kind=Topic,"
                         "involvedObject.name=load", "-o", "jsonpath={.items[*].reason}").stdout.split()
    assert events.count("LeaderElected") >= ROUNDS, "an Event on the Topic for each leader change"
    # The last round's pod is still coming back: the cluster recovers fully, in its status too.
    wait_until(lambda: whole(sub, ns, "load") and get_or_none(sub, "dmcluster", "demo", "-n", ns)["status"]
               .get("readyReplicas") == 3, 120, "three ready brokers in the DMCluster status after the chaos")
