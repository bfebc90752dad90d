"""Coordinator writes honour min.insync.replicas (issue 30): with the ISR of __consumer_offsets and
__transaction_state shrunk to the leader, an offset commit and a transaction-state write are refused
(COORDINATOR_NOT_AVAILABLE, Kafka's answer, so clients retry) instead of being acknowledged on one
disk; nothing refused becomes visible; once the follower is back, both go through. Two real brokers,
one SIGKILLed."""

from __future__ import annotations

import asyncio
import datetime
import time
from pathlib import Path

import pytest
from chaos_tools import FAST_FAILURE
from dm_broker.protocol.client import KafkaConnection
from group_clients import wait_for
from harness import Cluster
from kafka_acl_rules import req, sub

pytestmark = pytest.mark.timeout(300)
GROUP, TOPIC, TXN = "isr-group", "isr-data", "isr-txn"
SETTINGS = {**FAST_FAILURE, "min.insync.replicas": 2, "offsets.topic.replication.factor": 2,
            "offsets.topic.num.partitions": 1, "transaction.state.log.replication.factor": 2,
            "transaction.state.log.num.partitions": 1, "transaction.state.log.min.isr": 2}


def commit(offset: int):
    return req(8, 8, group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
               topics=(sub(8, 8, "OffsetCommitRequestTopic", name=TOPIC, partitions=(
                   sub(8, 8, "OffsetCommitRequestPartition", partition_index=0, committed_offset=offset,
                       committed_leader_epoch=-1, committed_metadata=""),)),))


def fetch_committed():
    return req(9, 8, groups=(sub(9, 8, "OffsetFetchRequestGroup", group_id=GROUP, topics=(
        sub(9, 8, "OffsetFetchRequestTopics", name=TOPIC, partition_indexes=(0,)),)),))


def init_producer_id():
    return req(22, 4, transactional_id=TXN, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
               producer_epoch=-1)


async def ask(port: int, request):
    conn = await KafkaConnection.open("127.0.0.1", port, "isr-test")
    try:
        return await conn.request(request, timeout=20)
    finally:
        await conn.close()


async def until_ok(cluster: Cluster, key_type: int, make_request, code_of, timeout: float = 60):
    """Sends the request to the coordinator of GROUP (key_type 0) or TXN (1) until it succeeds; its answer.
    The coordinator is looked up for each try: once the restarted broker is back, the preferred leader
    election may move the internal partition, and the coordinator with it, to that broker."""
    deadline = time.monotonic() + timeout
    while True:
        found = await ask(cluster.brokers[0].port, req(10, 4, key_type=key_type,  # creates the topic at first
                                                       coordinator_keys=(GROUP if key_type == 0 else TXN,)))
        node = found.coordinators[0].node_id
        answer = await ask(cluster.brokers[node].port, make_request()) if node >= 0 else None
        code = code_of(answer) if answer is not None else -1
        if code == 0:
            return answer
        assert time.monotonic() < deadline, f"still error {code}"
        await asyncio.sleep(0.5)


def commit_code(resp) -> int:
    return int(resp.topics[0].partitions[0].error_code)


def fetch_code(resp) -> int:
    """The group's error, else the partition's."""
    group = resp.groups[0]
    return int(group.error_code) or int(group.topics[0].partitions[0].error_code)


def committed_offset(resp) -> int:
    return resp.groups[0].topics[0].partitions[0].committed_offset


async def test_coordinator_writes_need_min_insync_replicas(tmp_path: Path):
    from confluent_kafka.admin import AdminClient, NewTopic

    with Cluster(tmp_path, 2, SETTINGS) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 2)])[TOPIC].result(15)
        await until_ok(cluster, 0, lambda: commit(5), commit_code)
        await until_ok(cluster, 1, init_producer_id, lambda r: int(r.error_code))
        # the broker that stays leads both internal partitions (it is in their ISRs) with an ISR of one
        stays, dies = 0, 1
        port = cluster.brokers[stays].port
        cluster.brokers[dies].kill()
        wait_for(lambda: all(cluster.leader(t, 0) == stays and cluster.isr(t, 0) == [stays]
                             for t in ("__consumer_offsets", "__transaction_state")), timeout=30,
                 what="the ISRs shrunk to the broker that stays")

        refused = await ask(port, commit(9))
        assert commit_code(refused) == 15, refused  # COORDINATOR_NOT_AVAILABLE: retried, not acknowledged
        assert committed_offset(await ask(port, fetch_committed())) == 5  # the refused commit is not visible
        refused_txn = await ask(port, init_producer_id())
        assert int(refused_txn.error_code) == 15, refused_txn

        cluster.brokers[dies].start()
        wait_for(lambda: len(cluster.isr("__consumer_offsets", 0)) == 2, timeout=60, what="the ISR back")
        await until_ok(cluster, 0, lambda: commit(9), commit_code)
        fetched = await until_ok(cluster, 0, fetch_committed, fetch_code)
        assert committed_offset(fetched) == 9
        await until_ok(cluster, 1, init_producer_id, lambda r: int(r.error_code))
