"""Issue 31's scenario on kind: a cluster holding 2,000 partitions at RF 3 (so every broker hosts all of
them) under load over every partition survives the deletion of a leader's pod with nothing lost. The
Topic's status covers every partition throughout. Printed: the time from applying the Topic to every
partition in sync, from the pod deletion to the Topic's status naming new leaders for every partition
the pod led, and from there to the broker back in every ISR."""

from __future__ import annotations

import time

import pytest
from dm import (
    Workload,
    bootstrap,
    brokers_ready,
    create_cluster,
    fully_in_sync,
    leaders,
    parse_acks,
    topic,
    topic_status,
    verdict,
)
from measurements import note
from support import apply, wait_until

pytestmark = pytest.mark.timeout(1500)

PARTITIONS = 2000
# Records a second over all partitions, at most, and at most MAX_OUTSTANDING unacknowledged. The load is
# there to be kept through the fault, not to saturate. An open loop saturated the loaded CI testbed (kind
# beside the other lane, 2 cores) twice: at 400 a second it acknowledged about 300, and at 150 a second
# (2026-11-28) about 117, so the producer's queue and every record's wait grew the whole run (medians of
# 60-85 s), records reached librdkafka's 300 s message timeout, and 11 partitions had no acknowledgement
# 300 s after the start. With the bound, a slow testbed slows the producer instead.
RATE = 150
MAX_OUTSTANDING = 1000


def in_sync(sub, ns: str) -> bool:
    status = topic_status(sub, ns, "wide")
    return len(status.get("partitions", [])) == PARTITIONS and fully_in_sync(status)


def test_two_thousand_partitions_survive_a_leader_pod_deletion(e2e_namespace, operator):
    sub, ns = operator, e2e_namespace
    create_cluster(sub, ns)
    applied = time.monotonic()
    apply(sub, topic("wide", partitions=PARTITIONS, replicas=3, config={"min.insync.replicas": "2"}), ns)
    wait_until(lambda: in_sync(sub, ns), 300, f"{PARTITIONS} partitions led and fully in sync", interval_s=2)
    created_s = time.monotonic() - applied

    env = {"BOOTSTRAP": bootstrap(ns), "TOPIC": "wide", "PARTITIONS": PARTITIONS, "RATE": RATE,
           "MAX_OUTSTANDING": MAX_OUTSTANDING}
    producer = Workload(sub, ns, "producer.py", env)
    wait_until(lambda: len({p for p, *_ in parse_acks(producer.output)}) == PARTITIONS, 300,
               "an acknowledged record in every partition before the fault", interval_s=2)

    before = leaders(topic_status(sub, ns, "wide"))
    victim = max(set(before.values()), key=lambda b: sum(1 for leader in before.values() if leader == b))
    led = [p for p, leader in before.items() if leader == victim]
    deleted = time.monotonic()
    sub.kubectl("delete", "pod", f"demo-broker-{victim}", "-n", ns, "--wait=false")

    def moved() -> bool:
        now = leaders(topic_status(sub, ns, "wide"))
        return all(now.get(p) not in (victim, -1) for p in led)

    wait_until(moved, 120, f"the {len(led)} partitions broker {victim} led led elsewhere", interval_s=0.5)
    moved_s = time.monotonic() - deleted
    # The broker back in every partition's ISR, each seen with it at least once: on a loaded 2-core machine a
    # few of 2,000 ISRs shrink and heal at any moment (docs/testing.md), so all whole at one instant may not come.
    rejoined: set[int] = set()

    def back_everywhere() -> bool:
        if not brokers_ready(sub, ns):
            return False
        for p in topic_status(sub, ns, "wide").get("partitions", []):
            if p["leader"] >= 0 and victim in p["isr"]:
                rejoined.add(p["partition"])
        return len(rejoined) == PARTITIONS

    wait_until(back_everywhere, 300, f"broker {victim} back in every ISR", interval_s=2)
    whole_s = time.monotonic() - deleted
    time.sleep(5)  # load after the broker is back

    produced = producer.stop()
    reader = Workload(sub, ns, "consumer.py", {**env, "UNTIL_EMPTY": 15})
    reader.wait_for("REC", 120)
    result = verdict(produced, reader.stop(timeout_s=600))
    waits = sorted(at - sent for _, _, _, sent, at in result.acks)
    sent_times = [sent for _, _, _, sent, _ in result.acks]
    achieved = len(sent_times) / max(1.0, max(sent_times) - min(sent_times))
    note(f"[{sub.name}] {PARTITIONS} partitions RF 3: in sync {created_s:.0f} s after the Topic was applied; "
         f"broker {victim}'s pod (leading {len(led)}) deleted -> all led elsewhere in the status {moved_s:.1f} s, "
         f"-> back in every ISR {whole_s:.0f} s; {achieved:.0f} records/s acknowledged (at most {RATE}, "
         f"{MAX_OUTSTANDING} outstanding), acknowledged after a median {waits[len(waits) // 2]:.1f} s, "
         f"at most {waits[-1]:.0f} s; {result.summary()}")
    partitions_written = {p for p, _, _, _, _ in result.acks}
    assert len(partitions_written) == PARTITIONS, "the load reached every partition"
    assert result.ok, f"{result.summary()}: lost {result.lost[:10]} duplicated {result.duplicated[:10]} " \
                      f"{result.reordered} (outputs kept in {producer.kept.parent})"
