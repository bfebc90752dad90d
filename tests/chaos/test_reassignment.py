"""Partition reassignment (KIP-455) under acks=all load: replication factor 1 -> 3, 3 -> 3 across
brokers with the leader leaving, a SIGKILLed broker mid-move, cancellation; `dm cluster rebalance`
and `dm cluster drain` on six brokers. No acknowledged record may be lost at any step."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from chaos_tools import FAST_FAILURE, assert_nothing_lost, sequence_load, verify, wait_replicas_identical
from clients import ConfluentClient, Rec
from group_clients import wait_for
from harness import Cluster, run_dm
from measurements import note

pytestmark = pytest.mark.timeout(600)

SLOW_MOVES = {"leader.replication.throttled.rate": 300_000}  # bytes/s: a move of ~1 MB takes seconds


def dm(cluster: Cluster, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = run_dm(*args, "--bootstrap", cluster.bootstrap, timeout=300)
    if check:
        assert result.returncode == 0, f"dm {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result


def partition_state(cluster: Cluster, topic: str, partition: int) -> dict:
    return cluster.metadata()["topics"][topic]["partitions"][partition]


def reassign(cluster: Cluster, targets: dict[tuple[str, int], list[int]]) -> None:
    from kafka import KafkaAdminClient, TopicPartition

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        result = admin.alter_partition_reassignments({TopicPartition(t, p): r for (t, p), r in targets.items()})
        assert all(err is None for err in result.values()), result
    finally:
        admin.close()


def ongoing(cluster: Cluster) -> dict:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        return admin.list_partition_reassignments()
    finally:
        admin.close()


def set_cluster_throttle(cluster: Cluster, rate: int) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        configs = {"leader.replication.throttled.rate": str(rate), "follower.replication.throttled.rate": str(rate)}
        admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, str(b.node_id), configs=configs)
                             for b in cluster.brokers], incremental=False)
    finally:
        admin.close()


def fill(cluster: Cluster, topic: str, partitions: int, megabytes: float) -> int:
    count = int(megabytes * 1024)
    records = [Rec(None, b"x" * 1000, partition=i % partitions) for i in range(count)]
    ConfluentClient(cluster.bootstrap).produce(topic, records)
    return count


def test_moves_under_load_survive_a_sigkilled_broker(tmp_path: Path):
    overrides = {**FAST_FAILURE, **SLOW_MOVES}
    with Cluster(tmp_path, brokers=4, overrides=overrides) as cluster:
        client = ConfluentClient(cluster.bootstrap)
        client.create_topic("grow", 1, {"min.insync.replicas": "1"}, replication_factor=1)
        client.create_topic("shift", 2, {"min.insync.replicas": "2"}, replication_factor=3)
        filled = {"grow": fill(cluster, "grow", 1, 1), "shift": fill(cluster, "shift", 2, 2)}
        grow = partition_state(cluster, "grow", 0)["replicas"]
        shift = [partition_state(cluster, "shift", p)["replicas"] for p in range(2)]
        spare = [next(b for b in range(4) if b not in r) for r in shift]
        targets = {
            ("grow", 0): grow + [b for b in range(4) if b not in grow][:2],  # RF 1 -> 3
            ("shift", 0): [spare[0], *shift[0][1:]],  # the leader (first replica) leaves
            ("shift", 1): [*shift[1][:2], spare[1]],  # 3 -> 3, a follower moves
        }
        with sequence_load(cluster.bootstrap, "shift", 2) as shift_load, \
                sequence_load(cluster.bootstrap, "grow", 1) as grow_load:
            reassign(cluster, targets)
            wait_for(lambda: len(ongoing(cluster)) == 3, timeout=10, what="three reassignments listed")
            listed = ongoing(cluster)
            assert all(v["adding_replicas"] for v in listed.values()), listed
            time.sleep(1.5)  # mid-move: the new replicas are copying under the throttle
            assert ongoing(cluster), "the moves finished before the kill: raise the data size or the throttle"
            victim = partition_state(cluster, "shift", 1)["leader"]
            cluster.brokers[victim].kill()
            time.sleep(2)
            cluster.brokers[victim].start()
            # The throttle is below what the producers write: lift it (dynamic broker configs through
            # the older AlterConfigs API) so the moves can finish.
            set_cluster_throttle(cluster, 50_000_000)
            wait_for(lambda: not ongoing(cluster), timeout=240, what="the reassignments to complete")
            time.sleep(1)
        for (topic, p), target in targets.items():
            state = partition_state(cluster, topic, p)
            assert sorted(state["replicas"]) == sorted(target) and sorted(state["isr"]) == sorted(target), state
            assert state["leader"] in target
            wait_replicas_identical([cluster.brokers[b].data_dir for b in target], topic, p, timeout=60)
            for b in set(range(4)) - set(target):
                assert not (cluster.brokers[b].data_dir / f"{topic}-{p}").exists(), f"{topic}-{p} left on {b}"
        for topic, load, partitions in (("shift", shift_load, 2), ("grow", grow_load, 1)):
            result = verify(cluster.bootstrap, topic, load, partitions, other_records=filled[topic])
            note(f"[{topic}] {result}")
            assert_nothing_lost(result, load)


def spread_of(cluster: Cluster, topic: str | None, brokers: list[int]) -> tuple[dict[int, int], dict[int, int]]:
    """broker -> replicas, broker -> current leaderships, from the controller (of one topic or all)."""
    replicas = dict.fromkeys(brokers, 0)
    leaders = dict.fromkeys(brokers, 0)
    for name, doc in cluster.metadata()["topics"].items():
        if topic not in (None, name):
            continue
        for p in doc["partitions"]:
            for r in p["replicas"]:
                replicas[r] += 1
            leaders[p["leader"]] += 1
    return replicas, leaders


def within_one(counts: dict[int, int]) -> bool:
    return max(counts.values()) - min(counts.values()) <= 1


def test_cancel_reverts_and_a_grown_cluster_rebalances_and_drains(tmp_path: Path):
    cluster = Cluster(tmp_path, brokers=6, overrides={**FAST_FAILURE, **SLOW_MOVES})
    try:
        cluster.controller.start()
        for b in cluster.brokers[:3]:
            b.start()
        bootstrap = ",".join(b.bootstrap for b in cluster.brokers[:3])
        client = ConfluentClient(bootstrap)
        client.create_topic("bal", 12, {"min.insync.replicas": "2"}, replication_factor=3)
        client.create_topic("live", 6, {"min.insync.replicas": "2"}, replication_factor=3)
        count = fill(cluster, "bal", 12, 2)

        # A grown cluster: new brokers hold nothing until a rebalance.
        for b in cluster.brokers[3:]:
            b.start()
        replicas, _ = spread_of(cluster, "bal", list(range(6)))
        assert [replicas[b] for b in (3, 4, 5)] == [0, 0, 0]
        dry = dm(cluster, "cluster", "rebalance", "--dry-run")
        assert "dry run: nothing was changed" in dry.stdout and "copies" in dry.stdout, dry.stdout
        assert spread_of(cluster, "bal", list(range(6)))[0] == replicas

        # Cancel: a throttled move started and cancelled leaves the partition as it was.
        before = partition_state(cluster, "bal", 0)["replicas"]
        target = [b for b in range(6) if b not in before][:3]
        plan = tmp_path / "plan.json"
        plan.write_text(f'{{"version": 1, "partitions": [{{"topic": "bal", "partition": 0, "replicas": {target}}}]}}')
        started = dm(cluster, "topics", "reassign", str(plan), "--no-wait", "--throttle", "20000")
        assert "1 partition reassignments started" in started.stdout, started.stdout
        assert "bal" in dm(cluster, "topics", "reassign", "--status").stdout
        cancelled = dm(cluster, "topics", "reassign", "--cancel")
        assert "cancelled 1 reassignments" in cancelled.stdout, cancelled.stdout
        state = partition_state(cluster, "bal", 0)
        assert state["replicas"] == before and not state.get("adding_replicas"), state
        for b in target:
            wait_for(lambda b=b: not (cluster.brokers[b].data_dir / "bal-0").exists(), timeout=20,
                     what=f"the cancelled replica's data gone from broker {b}")
        dm(cluster, "cluster", "rebalance", "--dry-run")  # no reassignment left in progress

        with sequence_load(bootstrap, "live", 6) as load:
            out = dm(cluster, "cluster", "rebalance", "--throttle", "2000000").stdout
            assert "partitions reassigned" in out and "replication throttle removed" in out, out
        for topic in ("bal", "live", None):  # each topic, and all together
            replicas, leaders = spread_of(cluster, topic, list(range(6)))
            assert within_one(replicas), (topic, replicas)
            wait_for(lambda topic=topic: within_one(spread_of(cluster, topic, list(range(6)))[1]), timeout=30,
                     what=f"leaders of {topic or 'all topics'} within one per broker ({leaders})")
        assert "nothing to move" in dm(cluster, "cluster", "rebalance", "--dry-run").stdout
        elected = dm(cluster, "topics", "elect-leaders", "bal").stdout
        assert elected.count("already led by its preferred replica") + elected.count("new leader elected") == 12
        ghost = dm(cluster, "topics", "elect-leaders", "ghost", check=False)
        assert ghost.returncode == 1 and "topic ghost does not exist" in ghost.stderr
        broken = tmp_path / "broken.json"
        for text, message in (("{", "cannot read the plan"), ('{"partitions": []}', "expected"),
                              ('{"partitions": [{"topic": "bal", "partition": 0, "replicas": [1, 1]}]}',
                               "lists a broker twice")):
            broken.write_text(text)
            bad = dm(cluster, "topics", "reassign", str(broken), check=False)
            assert bad.returncode == 1 and message in bad.stderr, bad.stderr
        unknown = tmp_path / "unknown.json"
        unknown.write_text('{"partitions": [{"topic": "bal", "partition": 0, "replicas": [0, 42]}]}')
        refused = dm(cluster, "topics", "reassign", str(unknown), check=False)
        assert refused.returncode == 1 and "not registered" in refused.stdout, refused.stdout

        out = dm(cluster, "cluster", "drain", "5").stdout
        assert "broker 5 holds no replicas now" in out, out
        replicas, _ = spread_of(cluster, "bal", list(range(6)))
        assert replicas[5] == 0 and within_one({b: replicas[b] for b in range(5)}), replicas
        assert_nothing_lost(verify(bootstrap, "live", load, 6), load)
        got = ConfluentClient(bootstrap).consume("bal", count, timeout=90)
        assert len(got) == count and len({(g.partition, g.offset) for g in got}) == count

        # A broker that is down is neither emptied by a rebalance nor planned around: the rebalance
        # waits for it; draining it is asked for by name.
        cluster.brokers[4].kill()
        wait_for(lambda: any(b["node_id"] == 4 and b["fenced"] for b in cluster.metadata()["brokers"]),
                 timeout=30, what="broker 4 fenced")
        wait_for(lambda: "broker 4 is not serving" in dm(cluster, "cluster", "rebalance", "--dry-run",
                                                         check=False).stderr,
                 timeout=30, what="the rebalance refused while broker 4 is down")
        waiting = dm(cluster, "cluster", "rebalance", "--dry-run", check=False)
        assert waiting.returncode == 1 and "drain it (`dm cluster drain 4`)" in waiting.stderr, waiting.stderr
        gone = dm(cluster, "cluster", "drain", "4", "--dry-run").stdout
        assert "dry run: nothing was changed" in gone and "drain broker 4" in gone, gone
    finally:
        cluster.stop()
