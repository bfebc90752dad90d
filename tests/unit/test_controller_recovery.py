"""The controller's side of ADR 0017 (no retained byte lost), on a real controller with its file
store: cluster identity, recovery of topics from what brokers report, tombstones, producer ids, and
Kafka's refusal to revert a reassignment into an unclean election."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from dm_broker.controller.controller import PRODUCER_ID_RECOVERY_GAP, Controller, ControllerError
from dm_broker.controller.models import (
    AlterIsrRequest,
    CreateTopicRequest,
    HeldPartition,
    HeldTopic,
    ReassignmentRequest,
    RegisterRequest,
)
from dm_broker.controller.store import FileControllerStore
from test_controller import Clock


def reg(node: int, cluster_id: str | None = None, held: list[HeldPartition] | None = None,
        topics: dict[str, HeldTopic] | None = None, pid_end: int = 0, incarnation: str = "") -> RegisterRequest:
    return RegisterRequest(node_id=node, host="h", port=9000 + node, incarnation=incarnation or f"i{node}",
                           cluster_id=cluster_id, holdings=held or [], topics=topics or {}, producer_id_end=pid_end)


async def open_controller(store: Path, clock: Clock | None = None, **kwargs) -> Controller:
    return await Controller.open(FileControllerStore(store), session_timeout_ms=2000, clock=clock or Clock(),
                                 **kwargs)


async def test_the_first_broker_gives_the_cluster_its_id_and_another_clusters_broker_is_refused(tmp_path: Path):
    c = await open_controller(tmp_path / "c")
    assert c.cluster_info().cluster_id is None
    resp = await c.register(reg(0))  # a new cluster
    assert c.cluster_info().cluster_id == resp.cluster_id and not c.recovering_cluster
    assert (await c.register(reg(1, cluster_id=resp.cluster_id))).cluster_id == resp.cluster_id
    with pytest.raises(ControllerError) as refused:
        await c.register(reg(2, cluster_id="another-cluster"))
    assert refused.value.error == "inconsistent_cluster_id"

    fresh = await open_controller(tmp_path / "lost")  # a controller that lost its state
    resp = await fresh.register(reg(0, cluster_id="kept-cluster"))
    assert resp.cluster_id == "kept-cluster" and fresh.recovering_cluster


def orders(replicas: list[list[int]], epochs: list[int] | None = None) -> HeldTopic:
    return HeldTopic(topic_id="11111111-1111-1111-1111-111111111111", configs={"retention.ms": "1000"},
                     replicas=replicas, partition_epochs=epochs or [3] * len(replicas), partition_count=len(replicas))


def held(node_logs: dict[int, tuple[int, int]], partition: int = 0) -> dict[int, HeldPartition]:
    """node -> its log of orders-<partition> with (last leader epoch, log end offset)."""
    return {n: HeldPartition(topic="orders", partition=partition, topic_id="11111111-1111-1111-1111-111111111111",
                             last_leader_epoch=e, log_end_offset=leo) for n, (e, leo) in node_logs.items()}


async def test_topics_are_recovered_from_the_brokers_and_the_most_advanced_log_leads(tmp_path: Path):
    clock = Clock()
    c = await open_controller(tmp_path, clock, expected_brokers=3)
    logs = held({0: (4, 900), 1: (5, 1000), 2: (5, 990)})
    assignment = {"orders": orders([[0, 1, 2]])}
    await c.register(reg(0, "kept", [logs[0]], assignment, pid_end=5000))
    doc = c.topics["orders"]
    assert doc.topic_id == "11111111-1111-1111-1111-111111111111" and doc.configs == {"retention.ms": "1000"}
    p = doc.partitions[0]
    assert p.recovering and p.leader == -1 and p.replicas == [0, 1, 2]
    assert c.in_recovery_window()
    with pytest.raises(ControllerError) as refused:  # a topic made now could take a reporting broker's name
        await c.create_topic(CreateTopicRequest(name="new", partitions=1, replication_factor=1))
    assert refused.value.error == "not_controller"
    await c.register(reg(1, "kept", [logs[1]], assignment))
    assert c.topics["orders"].partitions[0].leader == -1, "no leader until every replica reported"
    await c.register(reg(2, "kept", [logs[2]], assignment))
    p = c.topics["orders"].partitions[0]
    assert not p.recovering and p.leader == 1 and p.isr == [1] and p.leader_epoch == 6
    assert not c.in_recovery_window()
    # Producer ids resume above what any broker reported, with the recovery gap.
    block = await c.allocate_producer_ids()
    assert block.first >= 5000 + PRODUCER_ID_RECOVERY_GAP
    # The recovered state is persisted: a restart knows it, and the same id.
    again = await open_controller(tmp_path)
    assert again.cluster_info().cluster_id == "kept" and again.topics["orders"].partitions[0].leader == 1


async def test_a_recovering_partition_waits_for_its_most_advanced_replica_or_an_unclean_election(tmp_path: Path):
    c = await open_controller(tmp_path, expected_brokers=2)
    logs = held({0: (2, 100), 1: (3, 150)})
    assignment = {"orders": orders([[0, 1, 2]])}
    await c.register(reg(0, "kept", [logs[0]], assignment))
    await c.register(reg(1, "kept", [logs[1]], assignment))
    assert c.topics["orders"].partitions[0].leader == -1, "broker 2 (a replica) has not reported"
    results = await c.elect_leaders(True, [("orders", 0)])
    assert results[0].error is None
    p = c.topics["orders"].partitions[0]
    assert p.leader == 1 and p.isr == [1] and not p.recovering, "the most advanced of the replicas that reported"


async def test_a_later_broker_adds_partitions_the_others_did_not_hold(tmp_path: Path):
    c = await open_controller(tmp_path)
    t = orders([[0], [1]])
    await c.register(reg(0, "kept", [held({0: (0, 10)})[0]], {"orders": t}))
    assert len(c.topics["orders"].partitions) == 2, "the cache knew two partitions"
    await c.register(reg(1, "kept", [held({1: (0, 20)}, partition=1)[1]], {"orders": t}))
    parts = c.topics["orders"].partitions
    assert [p.leader for p in parts] == [0, 1] and not any(p.recovering for p in parts)


async def test_deleted_topics_are_tombstoned_and_not_adopted_again(tmp_path: Path):
    c = await open_controller(tmp_path)
    await c.register(reg(0))
    doc = await c.create_topic(CreateTopicRequest(name="gone", partitions=1, replication_factor=1))
    await c.delete_topic("gone")
    assert [t.topic_id for t in c.metadata().deleted_topics] == [doc.topic_id]
    # A broker that slept through the deletion still holds the log: it is not brought back.
    stale = HeldPartition(topic="gone", partition=0, topic_id=doc.topic_id, last_leader_epoch=0, log_end_offset=5)
    await c.register(reg(0, c.cluster.cluster_id, [stale], incarnation="again"))
    assert "gone" not in c.topics
    # A topic held under an id the controller does not know, with a free name, is adopted.
    other = HeldPartition(topic="kept", partition=0, topic_id="22222222-2222-2222-2222-222222222222",
                          last_leader_epoch=1, log_end_offset=7)
    await c.register(reg(0, c.cluster.cluster_id, [stale, other], incarnation="third"))
    assert c.topics["kept"].topic_id == "22222222-2222-2222-2222-222222222222"
    assert c.topics["kept"].partitions[0].leader == 0


async def test_producer_ids_never_repeat_across_a_lost_state(tmp_path: Path):
    c = await open_controller(tmp_path / "c")
    await c.register(reg(0))
    blocks = [await c.allocate_producer_ids() for _ in range(3)]
    end = blocks[-1].first + blocks[-1].size
    shutil.rmtree(tmp_path / "c")
    lost = await open_controller(tmp_path / "c")
    await lost.register(reg(0, c.cluster.cluster_id, pid_end=end))
    assert (await lost.allocate_producer_ids()).first >= end


async def test_a_revert_that_would_be_an_unclean_election_is_refused(tmp_path: Path):
    c = await open_controller(tmp_path)
    epochs = {i: (await c.register(reg(i))).broker_epoch for i in range(3)}
    await c.create_topic(CreateTopicRequest(name="moving", partitions=1, replication_factor=1, assignments=[[0]]))
    await c.alter_reassignments([ReassignmentRequest(topic="moving", partition=0, replicas=[1, 2])])
    p = c.topics["moving"].partitions[0]
    resp = await c.alter_isr(AlterIsrRequest(node_id=0, broker_epoch=epochs[0], topic="moving", partition=0,
                                             leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                                             new_isr=[0, 1]))
    assert resp.error is None
    await c.fence(0, "test")  # the original replica leaves the ISR: only the added broker 1 is in sync
    p = c.topics["moving"].partitions[0]
    assert p.isr == [1] and p.leader == 1 and p.reassigning
    results = await c.alter_reassignments([ReassignmentRequest(topic="moving", partition=0, replicas=None)])
    assert results[0].error == "invalid_replica_assignment" and "unclean" in results[0].message
    assert c.topics["moving"].partitions[0].reassigning, "nothing changed"
    await c.alter_configs("moving", {"unclean.leader.election.enable": "true"})
    results = await c.alter_reassignments([ReassignmentRequest(topic="moving", partition=0, replicas=None)])
    assert results[0].error is None and c.topics["moving"].partitions[0].replicas == [0]
