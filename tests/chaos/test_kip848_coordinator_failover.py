"""A KIP-848 group whose coordinator is SIGKILLed: the group's epochs and assignments come back from
`__consumer_offsets` on the new coordinator, no member is fenced or rebalanced, and every
acknowledged record is read."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from chaos_tools import FAST_FAILURE, create_topic, fully_replicated
from clients import ConfluentClient, Rec
from dm_broker.groups.coordinator import OFFSETS_TOPIC
from dm_broker.partitioners import murmur2_partition
from dm_broker.protocol.build import make
from dm_broker.protocol.client import KafkaConnection
from dm_broker.protocol.codec import request_class
from group_clients import ConfluentKip848Consumer, Seen, wait_for
from harness import Cluster
from kio.schema.errors import ErrorCode

pytestmark = pytest.mark.timeout(240)

OVERRIDES = {**FAST_FAILURE, "group.consumer.min.session.timeout.ms": 1000,
             "group.consumer.session.timeout.ms": 6000, "group.consumer.min.heartbeat.interval.ms": 100,
             "group.consumer.heartbeat.interval.ms": 500}


async def describe(cluster: Cluster, broker: int, group: str):
    host, port = cluster.address(broker).rsplit(":", 1)
    conn = await KafkaConnection.open(host, int(port))
    try:
        resp = await conn.request(make(request_class(69, 1), group_ids=(group,), include_authorized_operations=False))
        return resp.groups[0]
    finally:
        await conn.close()


def test_coordinator_sigkill_keeps_epochs_and_loses_nothing(tmp_path: Path):
    group, topic = "kip848-failover", "kip848-failover"
    with Cluster(tmp_path, overrides=OVERRIDES) as cluster:
        create_topic(cluster, topic, 6)
        wait_for(lambda: fully_replicated(cluster, topic, 6), 30, what="the topic fully replicated")
        client = ConfluentClient(cluster.bootstrap)
        client.produce(topic, [Rec(b"k%d" % i, b"%06d" % i) for i in range(300)], acks="all")
        seen: list[Seen] = []
        members = [ConfluentKip848Consumer(cluster.bootstrap, group, topic, f"m{i}", seen) for i in range(3)]
        for m in members:
            m.start()
        try:
            wait_for(lambda: len({s.value for s in seen}) >= 300 and all(len(m.assigned) == 2 for m in members), 90,
                     what="three members reading every record")
            partition = murmur2_partition(group.encode(), 50)
            wait_for(lambda: fully_replicated(cluster, OFFSETS_TOPIC, 50), 30, what="__consumer_offsets in sync")
            coordinator = cluster.leader(OFFSETS_TOPIC, partition)
            before = asyncio.run(describe(cluster, coordinator, group))
            assert before.error_code == ErrorCode.none and len(before.members) == 3

            cluster.brokers[coordinator].kill()
            wait_for(lambda: cluster.leader(OFFSETS_TOPIC, partition) not in (coordinator, -1), 30,
                     what="a new coordinator")
            successor = cluster.leader(OFFSETS_TOPIC, partition)
            survivors = ",".join(cluster.address(i) for i in range(3) if i != coordinator)
            ConfluentClient(survivors).produce(topic, [Rec(b"k%d" % i, b"%06d" % i) for i in range(300, 600)],
                                               acks="all")
            wait_for(lambda: len({s.value for s in seen}) >= 600, 90, what="every record after the failover")

            after = asyncio.run(describe(cluster, successor, group))
            assert after.error_code == ErrorCode.none, after
            assert after.group_epoch == before.group_epoch, "the coordinator move rebalanced or fenced members"
            assert {(m.member_id, m.member_epoch) for m in after.members} == \
                {(m.member_id, m.member_epoch) for m in before.members}
        finally:
            for m in members:
                m.stop_event.set()
            for m in members:
                m.join(30)
        assert not [m.error for m in members if m.error]
        assert sorted({s.value for s in seen}) == [b"%06d" % i for i in range(600)]
        print(f"\nKIP-848 coordinator failover: {len(seen) - 600} records read twice (at-least-once around the "
              "failover)")
