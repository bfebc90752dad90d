from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from dm_broker.controller.controller import Controller, ControllerError
from dm_broker.controller.models import AlterIsrRequest, CreateTopicRequest, HeartbeatRequest, RegisterRequest
from dm_broker.controller.placement import assign
from dm_broker.controller.store import ConflictError, FileControllerStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(tmp: Path, brokers: int = 3, racks: list[str] | None = None) -> tuple[Controller, Clock, dict[int, int]]:
    clock = Clock()
    c = Controller(FileControllerStore(tmp), session_timeout_ms=2000, clock=clock)
    epochs = {}
    for i in range(brokers):
        rack = racks[i] if racks else None
        epochs[i] = c.register(RegisterRequest(node_id=i, host="h", port=9000 + i, rack=rack, incarnation=f"i{i}")
                               ).broker_epoch
    return c, clock, epochs


def test_placement_spreads_leaders_and_respects_racks():
    brokers = [(0, "a"), (1, "a"), (2, "b"), (3, "b"), (4, "c"), (5, "c")]
    plan = assign(brokers, 12, 3, seed=1)
    assert Counter(r[0] for r in plan) == Counter({b: 2 for b, _ in brokers})
    rack = dict(brokers)
    assert all(len({rack[b] for b in replicas}) == 3 for replicas in plan)
    assert all(len(set(r)) == 3 for r in plan)
    with pytest.raises(Exception, match="replication factor"):
        assign(brokers[:2], 1, 3)


async def test_election_from_isr_only_and_fencing(tmp_path):
    c, clock, epochs = make(tmp_path)
    doc = c.create_topic(CreateTopicRequest(name="t", partitions=3, replication_factor=3))
    p = doc.partitions[0]
    leader = p.leader
    clock.now += 1.0
    for i in range(3):
        if i != leader:
            c.heartbeat(HeartbeatRequest(node_id=i, broker_epoch=epochs[i]))
    clock.now += 1.5  # leader silent for 2.5 s > 2 s session
    c.started_at = 0
    c.check_liveness()
    after = c.topics["t"].partitions[0]
    assert after.leader != leader and after.leader in p.isr
    assert leader not in after.isr and after.leader_epoch == p.leader_epoch + 1
    # a stale leader cannot change the ISR (leader epoch CAS)
    resp = c.alter_isr(AlterIsrRequest(node_id=leader, broker_epoch=epochs[leader], topic="t", partition=0,
                                       leader_epoch=p.leader_epoch, partition_epoch=after.partition_epoch,
                                       new_isr=[leader]))
    assert resp.error is not None


async def test_no_unclean_election_unless_enabled(tmp_path):
    c, _, epochs = make(tmp_path)
    c.create_topic(CreateTopicRequest(name="t", partitions=1, replication_factor=3))
    c.create_topic(CreateTopicRequest(name="u", partitions=1, replication_factor=3,
                                      configs={"unclean.leader.election.enable": "true"}))
    for name in ("t", "u"):
        state = c.topics[name].partitions[0]
        leader = state.leader
        others = [r for r in state.replicas if r != leader]
        # shrink the ISR to the leader alone, then lose the leader
        c.alter_isr(AlterIsrRequest(node_id=leader, broker_epoch=epochs[leader], topic=name, partition=0,
                                    leader_epoch=state.leader_epoch, partition_epoch=state.partition_epoch,
                                    new_isr=[leader]))
        c._fence(leader, "test")
        after = c.topics[name].partitions[0]
        if name == "t":
            assert after.leader == -1 and after.isr == [leader]  # offline, keeps its last ISR member
        else:
            assert after.leader in others and after.isr == [after.leader]
        c.brokers[leader].fenced = False


async def test_alter_isr_is_compare_and_set_on_partition_epoch(tmp_path):
    c, _, epochs = make(tmp_path)
    state = c.create_topic(CreateTopicRequest(name="t", partitions=1, replication_factor=3)).partitions[0]
    leader = state.leader
    req = AlterIsrRequest(node_id=leader, broker_epoch=epochs[leader], topic="t", partition=0,
                          leader_epoch=state.leader_epoch, partition_epoch=state.partition_epoch,
                          new_isr=[leader, state.replicas[1] if state.replicas[0] == leader else state.replicas[0]])
    ok = c.alter_isr(req)
    assert ok.error is None and ok.state.partition_epoch == state.partition_epoch + 1
    again = c.alter_isr(req)  # same expected epoch: refused
    assert again.error == "invalid_update_version"
    assert c.alter_isr(req.model_copy(update={"new_isr": [99]})).error is not None


async def test_state_survives_restart_and_store_is_cas(tmp_path):
    c, _, _ = make(tmp_path)
    c.create_topic(CreateTopicRequest(name="t", partitions=2, replication_factor=2, configs={"retention.ms": "5"}))
    c.allocate_producer_ids()
    again = Controller(FileControllerStore(tmp_path))
    assert again.topics["t"].configs == {"retention.ms": "5"}
    assert [p.replicas for p in again.topics["t"].partitions] == [p.replicas for p in c.topics["t"].partitions]
    assert again.allocate_producer_ids().first == 1000  # never hands out the same block twice
    store = FileControllerStore(tmp_path)
    doc = store.load_topics()["t"]
    with pytest.raises(ConflictError):
        store.save_topic(doc, doc.version - 1)


async def test_topic_errors(tmp_path):
    c, _, _ = make(tmp_path, brokers=2)
    with pytest.raises(ControllerError, match="replication factor"):
        c.create_topic(CreateTopicRequest(name="t", partitions=1, replication_factor=3))
    with pytest.raises(ControllerError) as bad:
        c.create_topic(CreateTopicRequest(name="t", partitions=1, replication_factor=1,
                                          configs={"retention.ms": "x"}))
    assert bad.value.error == "invalid_config" and "retention.ms" in bad.value.message
    c.create_topic(CreateTopicRequest(name="t", partitions=1, replication_factor=2))
    with pytest.raises(ControllerError) as dup:
        c.create_topic(CreateTopicRequest(name="t", partitions=1, replication_factor=2))
    assert dup.value.error == "topic_already_exists"
    with pytest.raises(ControllerError, match="only"):
        from dm_broker.controller.models import CreatePartitionsRequest

        c.create_partitions("t", CreatePartitionsRequest(count=1))


async def test_controlled_shutdown_moves_leadership(tmp_path):
    c, _, epochs = make(tmp_path)
    c.create_topic(CreateTopicRequest(name="t", partitions=6, replication_factor=3))
    still = c.controlled_shutdown(0, epochs[0])
    assert still == []
    assert all(p.leader != 0 and 0 not in p.isr for p in c.topics["t"].partitions)


async def test_preferred_leader_returns(tmp_path):
    c, _, epochs = make(tmp_path)
    c.create_topic(CreateTopicRequest(name="t", partitions=3, replication_factor=3))
    c._fence(0, "test")
    moved = [p for p in c.topics["t"].partitions if p.replicas[0] == 0]
    assert all(p.leader != 0 for p in moved)
    c.brokers[0].fenced = False
    # back in the ISR (as the leaders would report), then preferred election
    for i, p in enumerate(c.topics["t"].partitions):
        if 0 not in p.isr:
            resp = c.alter_isr(AlterIsrRequest(node_id=p.leader, broker_epoch=epochs[p.leader], topic="t", partition=i,
                                               leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                                               new_isr=[*p.isr, 0]))
            assert resp.error is None, resp
    assert c.elect_preferred_leaders()
    assert all(p.leader == p.replicas[0] for p in c.topics["t"].partitions)


async def test_broker_default_allows_unclean_election(tmp_path):
    clock = Clock()
    c = Controller(FileControllerStore(tmp_path), session_timeout_ms=2000, clock=clock,
                   unclean_election_default=True)
    epochs = {i: c.register(RegisterRequest(node_id=i, host="h", port=9000 + i, incarnation=f"i{i}")).broker_epoch
              for i in range(3)}
    state = c.create_topic(CreateTopicRequest(name="t", partitions=1, replication_factor=3)).partitions[0]
    leader = state.leader
    c.alter_isr(AlterIsrRequest(node_id=leader, broker_epoch=epochs[leader], topic="t", partition=0,
                                leader_epoch=state.leader_epoch, partition_epoch=state.partition_epoch,
                                new_isr=[leader]))
    c._fence(leader, "test")
    after = c.topics["t"].partitions[0]
    assert after.leader not in (-1, leader) and after.isr == [after.leader]
    # a topic override still wins over the broker default
    c2 = c.create_topic(CreateTopicRequest(name="safe", partitions=1, replication_factor=2,
                                           configs={"unclean.leader.election.enable": "false"}))
    assert c2.partitions[0].leader != -1
