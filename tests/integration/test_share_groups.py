"""Share groups (KIP-932, queues) with confluent-kafka's ShareConsumer against real broker processes:
more consumers than partitions, explicit and implicit acknowledgement, release / reject, lock expiry
after a consumer is SIGKILLed holding records, the delivery limit, acknowledged state surviving a
broker SIGKILL (`__share_group_state`), and the wire-level errors."""

from __future__ import annotations

import asyncio
import datetime
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from clients import ConfluentClient, Rec
from confluent_kafka import AcknowledgeType, ShareConsumer
from confluent_kafka.admin import AdminClient
from dm_broker.protocol.build import make, nested
from dm_broker.protocol.client import KafkaConnection
from dm_broker.protocol.codec import request_class
from group_clients import share_group_reads_from_earliest, stop_all, wait_for
from harness import BrokerProcess, running_broker
from kio.schema.errors import ErrorCode
from wire import find_group_coordinator

pytestmark = pytest.mark.timeout(240)

SHARE_BROKER = {
    "group.share.min.session.timeout.ms": 1000, "group.share.session.timeout.ms": 6000,
    "group.share.min.heartbeat.interval.ms": 100, "group.share.heartbeat.interval.ms": 500,
    "group.share.min.record.lock.duration.ms": 1000, "group.share.record.lock.duration.ms": 3000,
    "group.share.delivery.count.limit": 3,
}
MEMBER_SCRIPT = Path(__file__).resolve().parent.parent / "share_member.py"


@pytest.fixture(scope="module")
def sbroker(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("share") / "data", SHARE_BROKER) as proc:
        yield proc


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def produce(bootstrap: str, topic: str, n: int, start: int = 0, partitions: int = 1) -> None:
    ConfluentClient(bootstrap).produce(topic, [Rec(None, b"%06d" % i) for i in range(start, start + n)], acks="all")


class Sharer(threading.Thread):
    """A ShareConsumer in a thread; `decide(value)` picks the acknowledgement in explicit mode."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, seen: list, decide=None) -> None:
        super().__init__(daemon=True, name=name)
        self.bootstrap, self.group, self.topic, self.seen, self.decide = bootstrap, group, topic, seen, decide
        self.stop_event = threading.Event()
        self.joined = threading.Event()
        self.error: BaseException | None = None
        self.lock = threading.Lock()

    def run(self) -> None:
        try:
            conf = {"bootstrap.servers": self.bootstrap, "group.id": self.group, "client.id": self.name}
            if self.decide is not None:
                conf["share.acknowledgement.mode"] = "explicit"
            consumer = ShareConsumer(conf)
            consumer.subscribe([self.topic])
            try:
                while not self.stop_event.is_set():
                    msgs = [m for m in consumer.poll(0.3) if m.error() is None]
                    self.joined.set()
                    for m in msgs:
                        with self.lock:
                            self.seen.append((self.name, m.partition(), m.offset(), m.value()))
                        if self.decide is not None:
                            consumer.acknowledge(m, self.decide(m.value()))
                    if msgs and self.decide is not None:
                        consumer.commit_sync(10)
            finally:
                consumer.close()
        except BaseException as exc:  # surfaced by the test
            self.error = exc

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)


def joined(sharers, timeout: float = 60) -> None:
    wait_for(lambda: all(s.joined.is_set() for s in sharers), timeout, what="the share consumers polling")


def test_more_consumers_than_partitions_each_record_once(sbroker):
    topic, group = unique("queue"), unique("sg")
    ConfluentClient(sbroker.bootstrap).create_topic(topic, 1)
    share_group_reads_from_earliest(sbroker.bootstrap, group)
    seen: list = []
    sharers = [Sharer(sbroker.bootstrap, group, topic, f"s{i}", seen) for i in range(4)]
    for s in sharers:
        s.start()
    try:
        joined(sharers)
        produce(sbroker.bootstrap, topic, 400)
        wait_for(lambda: len({v for *_, v in seen}) >= 400, 60, what="every record")
        time.sleep(1)
    finally:
        stop_all(sharers)
    counts = Counter(v for *_, v in seen)
    assert sorted(counts) == [b"%06d" % i for i in range(400)]
    assert max(counts.values()) == 1, "a record was delivered twice with implicit acknowledgement and no failure"
    per_consumer = Counter(name for name, *_ in seen)
    print(f"\nrecords per share consumer on one partition: {dict(per_consumer)}")

    async def listed() -> dict[str, tuple[str, str]]:
        conn = await KafkaConnection.open("127.0.0.1", sbroker.port)
        try:
            resp = await conn.request(make(request_class(16, 5), states_filter=(), types_filter=("share",)))
            return {g.group_id: (g.group_type, g.group_state) for g in resp.groups}
        finally:
            await conn.close()

    assert asyncio.run(listed())[group] == ("share", "Empty")  # the consumers closed: no members left


def test_released_records_come_back_and_rejected_ones_never(sbroker):
    topic, group = unique("release"), unique("sg")
    ConfluentClient(sbroker.bootstrap).create_topic(topic, 1)
    share_group_reads_from_earliest(sbroker.bootstrap, group)
    seen: list = []

    def decide(value: bytes) -> AcknowledgeType:
        number = int(value)
        if number % 10 == 0:
            return AcknowledgeType.REJECT
        first_time = sum(1 for *_, v in seen if v == value) == 1
        return AcknowledgeType.RELEASE if number % 10 == 1 and first_time else AcknowledgeType.ACCEPT

    sharer = Sharer(sbroker.bootstrap, group, topic, "explicit", seen, decide)
    sharer.start()
    try:
        joined([sharer])
        produce(sbroker.bootstrap, topic, 50)
        wait_for(lambda: len(seen) >= 55, 60, what="50 records and 5 redeliveries")
        time.sleep(2)
    finally:
        stop_all([sharer])
    counts = Counter(int(v) for *_, v in seen)
    assert all(counts[n] == 2 for n in range(50) if n % 10 == 1), counts  # released once, then accepted
    assert all(counts[n] == 1 for n in range(50) if n % 10 != 1), counts  # rejected ones are never redelivered


def test_locks_of_a_killed_consumer_expire_and_another_gets_the_records(sbroker):
    topic, group = unique("killed"), unique("sg")
    ConfluentClient(sbroker.bootstrap).create_topic(topic, 1)
    share_group_reads_from_earliest(sbroker.bootstrap, group)
    holder = subprocess.Popen([sys.executable, str(MEMBER_SCRIPT), sbroker.bootstrap, group, topic],
                              stdout=subprocess.PIPE, text=True)
    seen: list = []
    other = Sharer(sbroker.bootstrap, group, topic, "other", seen)
    try:
        produce(sbroker.bootstrap, topic, 20)
        held = set()
        line = holder.stdout.readline()
        while line.startswith("held"):
            held.add(int(line.split()[2]))
            if len(held) >= 1:
                break
            line = holder.stdout.readline()
        assert held, "the holder got nothing"
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        killed_at = time.monotonic()
        other.start()
        wait_for(lambda: len({o for _, _, o, _ in seen}) >= 20, 30, what="the other consumer getting every record")
        waited = time.monotonic() - killed_at
    finally:
        holder.kill()
        stop_all([other])
    got = Counter(o for _, _, o, _ in seen)
    assert held <= set(got), "records held by the killed consumer were not redelivered"
    print(f"\nheld by the killed consumer: {len(held)} records; all delivered elsewhere {waited:.1f} s after the kill "
          "(lock 3 s)")


def test_the_delivery_limit_archives_a_record_released_every_time(sbroker):
    topic, group = unique("limit"), unique("sg")
    ConfluentClient(sbroker.bootstrap).create_topic(topic, 1)
    share_group_reads_from_earliest(sbroker.bootstrap, group)
    seen: list = []
    sharer = Sharer(sbroker.bootstrap, group, topic, "releaser", seen, lambda _v: AcknowledgeType.RELEASE)
    sharer.start()
    try:
        joined([sharer])
        produce(sbroker.bootstrap, topic, 5)
        wait_for(lambda: len(seen) >= 15, 60, what="three deliveries of each record")
        time.sleep(3)
    finally:
        stop_all([sharer])
    assert Counter(int(v) for *_, v in seen) == {n: 3 for n in range(5)}  # group.share.delivery.count.limit=3


def test_acknowledged_records_are_not_redelivered_after_a_broker_sigkill(tmp_path):
    broker = BrokerProcess(tmp_path / "data", SHARE_BROKER)
    broker.start()
    topic, group = unique("durable"), unique("sg")
    seen: list = []
    try:
        ConfluentClient(broker.bootstrap).create_topic(topic, 1)
        share_group_reads_from_earliest(broker.bootstrap, group)
        first = Sharer(broker.bootstrap, group, topic, "before", seen, lambda _v: AcknowledgeType.ACCEPT)
        first.start()
        joined([first])
        produce(broker.bootstrap, topic, 50)
        wait_for(lambda: len(seen) >= 50, 60, what="50 records acknowledged")
        time.sleep(1)
        first.stop_event.set()
        broker.kill()
        first.join(30)
        broker.start()
        produce(broker.bootstrap, topic, 50, 50)
        second = Sharer(broker.bootstrap, group, topic, "after", seen, lambda _v: AcknowledgeType.ACCEPT)
        second.start()
        wait_for(lambda: len({v for *_, v in seen}) >= 100, 60, what="the records produced after the restart")
        time.sleep(1)
        stop_all([second])
    finally:
        broker.stop()
    after = [int(v) for name, _, _, v in seen if name == "after"]
    assert sorted(after) == list(range(50, 100)), "acknowledged records were delivered again after the restart"


async def _share_heartbeat(conn, group: str, member: str, epoch: int, topics=None):
    cls = request_class(76, 1)
    return await conn.request(make(cls, group_id=group, member_id=member, member_epoch=epoch, rack_id=None,
                                   subscribed_topic_names=topics))


def test_wire_errors(sbroker):
    topic, group = unique("wire"), unique("sg")
    ConfluentClient(sbroker.bootstrap).create_topic(topic, 1)

    async def scenario() -> None:
        conn = await KafkaConnection.open("127.0.0.1", sbroker.port)
        try:
            await find_group_coordinator(conn, group)
            joined_resp = await _share_heartbeat(conn, group, "m1", 0, (topic,))
            assert joined_resp.error_code == ErrorCode.none and joined_resp.member_epoch >= 1
            assert (await _share_heartbeat(conn, group, "m1", 99)).error_code == ErrorCode.fenced_member_epoch
            assert (await _share_heartbeat(conn, group, "ghost", 3)).error_code == ErrorCode.unknown_member_id
            assert (await _share_heartbeat(conn, group, "m2", 0)).error_code == ErrorCode.invalid_request
            topic_id = joined_resp.assignment.topic_partitions[0].topic_id
            ack = request_class(79, 1)
            batch = nested(ack, "AcknowledgementBatch")(first_offset=0, last_offset=0, acknowledge_types=(1,))
            body = make(ack, group_id=group, member_id="m1", share_session_epoch=0, topics=(make(
                nested(ack, "AcknowledgeTopic"), topic_id=topic_id, partitions=(make(
                    nested(ack, "AcknowledgePartition"), partition_index=0, acknowledgement_batches=(batch,)),)),))
            resp = await conn.request(body)
            assert resp.error_code == ErrorCode.invalid_share_session_epoch  # acknowledge cannot open a session
            fetch = request_class(78, 1)

            def fetch_body(epoch: int, acks=()):
                part = make(nested(fetch, "FetchPartition"), partition_index=0, acknowledgement_batches=acks)
                return make(fetch, group_id=group, member_id="m1", share_session_epoch=epoch,
                            max_wait=datetime.timedelta(milliseconds=100), min_bytes=1, max_bytes=1 << 20,
                            max_records=10, batch_size=10,
                            topics=(make(nested(fetch, "FetchTopic"), topic_id=topic_id, partitions=(part,)),),
                            forgotten_topics_data=())

            opened = await conn.request(fetch_body(0))
            assert opened.error_code == ErrorCode.none
            assert opened.acquisition_lock_timeout == datetime.timedelta(milliseconds=3000)
            assert (await conn.request(fetch_body(5))).error_code == ErrorCode.invalid_share_session_epoch
            fbatch = nested(fetch, "AcknowledgementBatch")(first_offset=0, last_offset=0, acknowledge_types=(1,))
            acked = await conn.request(fetch_body(1, (fbatch,)))  # offset 0 was never acquired by m1
            assert acked.responses[0].partitions[0].acknowledge_error_code == ErrorCode.invalid_record_state
            other = make(fetch, group_id=group, member_id="nobody", share_session_epoch=3,
                         max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1, max_records=1, batch_size=1,
                         topics=(), forgotten_topics_data=())
            assert (await conn.request(other)).error_code == ErrorCode.share_session_not_found
            ghost_part = make(nested(fetch, "FetchPartition"), partition_index=0, acknowledgement_batches=())
            def ghost_fetch(member: str):
                return make(fetch, group_id=group, member_id=member, share_session_epoch=0,
                            max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20, max_records=1, batch_size=1,
                            topics=(make(nested(fetch, "FetchTopic"), topic_id=uuid.uuid4(),
                                         partitions=(ghost_part,)),),
                            forgotten_topics_data=())
            # a member id that never joined the group opens no share session (issue 65)
            assert (await conn.request(ghost_fetch("ghost-topic"))).error_code == ErrorCode.unknown_member_id
            answer = await conn.request(ghost_fetch("m1"))  # m1 opens a new session naming a topic id nobody has
            assert answer.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_id
            desc = await conn.request(make(request_class(77, 1), group_ids=(group,),
                                           include_authorized_operations=False))
            assert desc.groups[0].group_state == "Stable" and desc.groups[0].members[0].member_id == "m1"
            consumer_desc = await conn.request(make(request_class(69, 1), group_ids=(group,),
                                                    include_authorized_operations=False))
            assert consumer_desc.groups[0].error_code == ErrorCode.group_id_not_found
            classic_desc = await conn.request(make(request_class(15, 5), groups=(group,),
                                                   include_authorized_operations=False))
            assert classic_desc.groups[0].error_code == ErrorCode.group_id_not_found
            deleted = await conn.request(make(request_class(42, 2), groups_names=(group,)))
            assert deleted.results[0].error_code == ErrorCode.non_empty_group  # m1 is still in it
            left = await _share_heartbeat(conn, group, "m1", -1)
            assert left.error_code == ErrorCode.none and left.member_epoch == -1
        finally:
            await conn.close()

    asyncio.run(scenario())


def test_share_auto_offset_reset_earliest_as_a_group_config(sbroker):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    topic, group = unique("earliest"), unique("sg")
    ConfluentClient(sbroker.bootstrap).create_topic(topic, 2)
    produce(sbroker.bootstrap, topic, 30)  # before any member: only earliest reads them
    admin = AdminClient({"bootstrap.servers": sbroker.bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(15)
    described = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)])
    configs = next(iter(described.values())).result(15)
    assert configs["share.auto.offset.reset"].value == "earliest"
    assert configs["share.record.lock.duration.ms"].value == "3000"  # the broker's default for every group
    bad = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "sideways", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception, match=r"share\.auto\.offset\.reset"):
        admin.incremental_alter_configs([bad])[bad].result(15)
    unknown = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.isolation.level", "read_committed", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception, match="not a group config dm has"):
        admin.incremental_alter_configs([unknown])[unknown].result(15)
    seen: list = []
    sharer = Sharer(sbroker.bootstrap, group, topic, "earliest", seen)
    sharer.start()
    try:
        wait_for(lambda: len(seen) >= 30, 60, what="the records produced before the group existed")
    finally:
        stop_all([sharer])
    assert sorted(int(v) for *_, v in seen) == list(range(30))


def test_share_group_offsets_described_altered_deleted_and_the_group_deleted(sbroker):
    topic, group = unique("offsets"), unique("sg")
    ConfluentClient(sbroker.bootstrap).create_topic(topic, 1)
    share_group_reads_from_earliest(sbroker.bootstrap, group)
    seen: list = []
    sharer = Sharer(sbroker.bootstrap, group, topic, "first", seen, lambda _v: AcknowledgeType.ACCEPT)
    sharer.start()
    try:
        joined([sharer])
        produce(sbroker.bootstrap, topic, 20)
        wait_for(lambda: len(seen) >= 20, 60, what="20 records accepted")
        time.sleep(1)
    finally:
        stop_all([sharer])

    async def call(body):
        conn = await KafkaConnection.open("127.0.0.1", sbroker.port)
        try:
            return await conn.request(body)
        finally:
            await conn.close()

    def describe_offsets() -> int:
        cls = request_class(90, 1)
        body = make(cls, groups=(make(nested(cls, "DescribeShareGroupOffsetsRequestGroup"), group_id=group,
                                      topics=None),))
        resp = asyncio.run(call(body))
        assert resp.groups[0].error_code == ErrorCode.none, resp
        return resp.groups[0].topics[0].partitions[0].start_offset

    wait_for(lambda: describe_offsets() == 20, 30, what="the start offset after 20 accepted records")
    alter = request_class(91, 0)
    part = make(nested(alter, "AlterShareGroupOffsetsRequestPartition"), partition_index=0, start_offset=5)
    body = make(alter, group_id=group, topics=(
        make(nested(alter, "AlterShareGroupOffsetsRequestTopic"), topic_name=topic, partitions=(part,)),))
    altered = asyncio.run(call(body))
    assert altered.error_code == ErrorCode.none
    assert altered.responses[0].partitions[0].error_code == ErrorCode.none, altered
    assert describe_offsets() == 5
    again: list = []
    sharer = Sharer(sbroker.bootstrap, group, topic, "again", again, lambda _v: AcknowledgeType.ACCEPT)
    sharer.start()
    try:
        wait_for(lambda: len(again) >= 15, 60, what="records 5-19 delivered again after the offsets were altered")
        time.sleep(1)
        busy = asyncio.run(call(body))  # a member is in the group now
        assert busy.error_code == ErrorCode.non_empty_group
    finally:
        stop_all([sharer])
    assert sorted(int(v) for *_, v in again) == list(range(5, 20))

    delete = request_class(92, 0)
    deleted = asyncio.run(call(make(delete, group_id=group, topics=(
        make(nested(delete, "DeleteShareGroupOffsetsRequestTopic"), topic_name=topic),))))
    assert deleted.error_code == ErrorCode.none and deleted.responses[0].error_code == ErrorCode.none, deleted
    gone = asyncio.run(call(make(request_class(42, 2), groups_names=(group,))))
    assert gone.results[0].error_code == ErrorCode.none
    listed = asyncio.run(call(make(request_class(16, 5), states_filter=(), types_filter=("share",))))
    assert group not in {g.group_id for g in listed.groups}


def test_v2_renews_a_records_lock(sbroker):
    """ShareFetch and ShareAcknowledge v2 (Kafka 4.2, which franz-go asks for): acknowledge type RENEW (4) keeps
    the records the member's and restarts their lock, and a ShareFetch with is_renew_ack only acknowledges."""
    topic, group = unique("renew"), unique("sg")
    ConfluentClient(sbroker.bootstrap).create_topic(topic, 1)

    async def scenario() -> None:
        first = await KafkaConnection.open("127.0.0.1", sbroker.port)
        second = await KafkaConnection.open("127.0.0.1", sbroker.port)
        try:
            await find_group_coordinator(first, group)
            joined = await _share_heartbeat(first, group, "m1", 0, (topic,))
            assert (await _share_heartbeat(second, group, "m2", 0, (topic,))).error_code == ErrorCode.none
            topic_id = joined.assignment.topic_partitions[0].topic_id
            fetch, ack = request_class(78, 2), request_class(79, 2)

            def fetch_body(member: str, epoch: int, renew: bool = False, acks=()):
                part = make(nested(fetch, "FetchPartition"), partition_index=0, acknowledgement_batches=acks)
                return make(fetch, group_id=group, member_id=member, share_session_epoch=epoch,
                            max_wait=datetime.timedelta(milliseconds=200), min_bytes=1, max_bytes=1 << 20,
                            max_records=10, batch_size=10, share_acquire_mode=0, is_renew_ack=renew,
                            topics=(make(nested(fetch, "FetchTopic"), topic_id=topic_id, partitions=(part,)),),
                            forgotten_topics_data=())

            assert (await first.request(fetch_body("m1", 0))).error_code == ErrorCode.none
            assert (await second.request(fetch_body("m2", 0))).error_code == ErrorCode.none
            produce(sbroker.bootstrap, topic, 1)
            got = await first.request(fetch_body("m1", 1))
            [held] = [a for r in got.responses for p in r.partitions for a in p.acquired_records]
            for epoch in (2, 3):  # the lock is 3 s: renewed every 1.5 s, the record stays m1's for 4.5 s
                await asyncio.sleep(1.5)
                renew = make(nested(ack, "AcknowledgementBatch"), first_offset=held.first_offset,
                             last_offset=held.last_offset, acknowledge_types=(4,))
                answer = await first.request(make(ack, group_id=group, member_id="m1", share_session_epoch=epoch,
                                                  is_renew_ack=True, topics=(make(
                                                      nested(ack, "AcknowledgeTopic"), topic_id=topic_id,
                                                      partitions=(make(nested(ack, "AcknowledgePartition"),
                                                                       partition_index=0,
                                                                       acknowledgement_batches=(renew,)),)),)))
                assert answer.error_code == ErrorCode.none
                assert answer.responses[0].partitions[0].error_code == ErrorCode.none
                assert answer.acquisition_lock_timeout == datetime.timedelta(milliseconds=3000)
            await asyncio.sleep(1.5)
            other = await second.request(fetch_body("m2", 1))
            assert not [a for r in other.responses for p in r.partitions for a in p.acquired_records]
            done = make(nested(fetch, "AcknowledgementBatch"), first_offset=held.first_offset,
                        last_offset=held.last_offset, acknowledge_types=(1,))
            accepted = await first.request(fetch_body("m1", 4, renew=True, acks=(done,)))
            assert accepted.responses[0].partitions[0].acknowledge_error_code == ErrorCode.none
            assert not [a for r in accepted.responses for p in r.partitions for a in p.acquired_records]
            v1 = request_class(79, 1)  # RENEW is v2's: a v1 acknowledgement of type 4 is refused
            old = await first.request(make(v1, group_id=group, member_id="m1", share_session_epoch=5, topics=(make(
                nested(v1, "AcknowledgeTopic"), topic_id=topic_id, partitions=(make(
                    nested(v1, "AcknowledgePartition"), partition_index=0, acknowledgement_batches=(make(
                        nested(v1, "AcknowledgementBatch"), first_offset=0, last_offset=0,
                        acknowledge_types=(4,)),)),)),)))
            assert old.responses[0].partitions[0].error_code == ErrorCode.invalid_record_state
        finally:
            await first.close()
            await second.close()

    asyncio.run(scenario())
