"""A broker back on a new disk leaves the ISRs it cannot serve (ADR 0047): the controller, in process,
with its file store; the pure selection without it."""

from __future__ import annotations

from dm_broker.controller.lost_replicas import lost_replicas, without_replica
from dm_broker.controller.models import (
    NO_LEADER,
    AlterIsrRequest,
    CreateTopicRequest,
    HeartbeatRequest,
    HeldPartition,
    PartitionState,
    RegisterRequest,
    TopicDoc,
)
from test_controller import make


def register(node: int, incarnation: str, new_dirs: list[str] | None = None,
             held: list[HeldPartition] | None = None) -> RegisterRequest:
    return RegisterRequest(node_id=node, host="h", port=9000 + node, incarnation=incarnation,
                           new_log_dirs=new_dirs or [], holdings=held or [])


def test_only_a_broker_with_a_new_directory_loses_what_it_does_not_hold():
    topics = {"t": TopicDoc(name="t", topic_id="id-t", partitions=[
        PartitionState(replicas=[0, 1], leader=0, isr=[0, 1]),
        PartitionState(replicas=[0, 1], leader=1, isr=[1]),  # not in sync there: nothing to lose
        PartitionState(replicas=[0, 1], leader=0, isr=[0, 1]),
        PartitionState(replicas=[0, 1], leader=0, isr=[0], recovering=True)])}
    held = [HeldPartition(topic="t", partition=2, topic_id=None)]  # a log from before topic ids: held
    # Its directories belong to the cluster: a log not created yet is not a loss.
    assert lost_replicas(register(0, "x", held=held), topics) == []
    assert lost_replicas(register(0, "x", ["/data"], held), topics) == [("t", 0)]
    other_id = [HeldPartition(topic="t", partition=2, topic_id="an-older-t")]
    assert lost_replicas(register(0, "x", ["/data"], other_id), topics) == [("t", 0), ("t", 2)]


def test_without_replica_leaves_no_leader_where_it_led():
    p = PartitionState(replicas=[0, 1, 2], leader=0, isr=[0, 1], leader_epoch=3, partition_epoch=5)
    out = without_replica(p, 0)
    assert (out.leader, out.isr, out.leader_epoch, out.partition_epoch) == (NO_LEADER, [1], 4, 6)
    follower = without_replica(p, 1)
    assert (follower.leader, follower.isr, follower.leader_epoch) == (0, [0], 3)


async def test_a_wiped_last_in_sync_replica_does_not_lead_and_the_best_log_wins_an_unclean_election(tmp_path):
    c, _, epochs = await make(tmp_path)
    doc = await c.create_topic(CreateTopicRequest(name="t", partitions=1, replication_factor=3))
    await c.create_topic(CreateTopicRequest(name="u", partitions=1, replication_factor=3))
    state = c.topics["t"].partitions[0]
    leader = state.leader
    a, b = [r for r in state.replicas if r != leader]
    await c.alter_isr(AlterIsrRequest(node_id=leader, broker_epoch=epochs[leader], topic="t", partition=0,
                                      leader_epoch=state.leader_epoch, partition_epoch=state.partition_epoch,
                                      new_isr=[leader]))  # t-0: the leader alone in sync
    await c._fence(leader, "killed")
    assert c.topics["t"].partitions[0].isr == [leader]  # the last in-sync replica keeps its place
    # The others come back with what they hold (a is further than b), then the leader on an empty disk.
    for node, end in ((a, 100), (b, 50)):
        await c.register(register(node, f"again-{node}", held=[
            HeldPartition(topic="t", partition=0, topic_id=doc.topic_id, last_leader_epoch=0, log_end_offset=end)]))
    await c.register(register(leader, "wiped", ["/var/lib/dm/data"]))
    t = c.topics["t"].partitions[0]
    assert (t.leader, t.isr) == (NO_LEADER, [])  # offline: nobody in sync, nothing elected on its own
    await c._elect_offline_partitions()
    assert c.topics["t"].partitions[0].leader == NO_LEADER
    u = c.topics["u"].partitions[0]
    assert leader not in u.isr and u.leader in (a, b)  # u-0 had others in sync: they lead, it catches up
    [result] = await c.elect_leaders(unclean=True, partitions=[("t", 0)])
    assert result.error is None
    elected = c.topics["t"].partitions[0]
    assert (elected.leader, elected.isr) == (a, [a])  # the most advanced log, not the first live replica


async def test_a_broker_restarted_on_its_own_disk_leads_again(tmp_path):
    """The everyday restart of a lone broker (dm up): its directories are known, so it stays the in-sync
    replica of what it led, whatever it reports holding, and leads again."""
    c, _, _ = await make(tmp_path, brokers=1)
    await c.create_topic(CreateTopicRequest(name="t", partitions=2, replication_factor=1))
    await c._fence(0, "killed")
    assert [(p.leader, p.isr) for p in c.topics["t"].partitions] == [(NO_LEADER, [0])] * 2
    await c.register(register(0, "restarted"))
    c.brokers[0].fenced = False
    await c._elect_offline_partitions()
    assert [(p.leader, p.isr) for p in c.topics["t"].partitions] == [(0, [0])] * 2


async def test_an_unclean_election_uses_what_heartbeats_last_said_of_leaderless_partitions(tmp_path):
    """A follower keeps copying after it registered, so its registration's figures go stale: brokers
    report their logs of leaderless partitions with every heartbeat, and the election uses those."""
    c, _, epochs = await make(tmp_path)
    doc = await c.create_topic(CreateTopicRequest(name="t", partitions=1, replication_factor=3))
    state = c.topics["t"].partitions[0]
    leader = state.leader
    a, b = [r for r in state.replicas if r != leader]
    held = {a: 100, b: 50}
    for node in (a, b):
        epochs[node] = (await c.register(register(node, f"again-{node}", held=[HeldPartition(
            topic="t", partition=0, topic_id=doc.topic_id, last_leader_epoch=0, log_end_offset=held[node])]))
            ).broker_epoch
    current = c.topics["t"].partitions[0]
    await c.alter_isr(AlterIsrRequest(node_id=leader, broker_epoch=epochs[leader], topic="t", partition=0,
                                      leader_epoch=current.leader_epoch, partition_epoch=current.partition_epoch,
                                      new_isr=[leader]))
    await c._fence(leader, "killed")
    assert c.topics["t"].partitions[0].leader == NO_LEADER
    await c.heartbeat(HeartbeatRequest(node_id=b, broker_epoch=epochs[b], leaderless_holdings=[HeldPartition(
        topic="t", partition=0, topic_id=doc.topic_id, last_leader_epoch=0, log_end_offset=500)]))
    [result] = await c.elect_leaders(unclean=True, partitions=[("t", 0)])
    assert result.error is None and c.topics["t"].partitions[0].leader == b
