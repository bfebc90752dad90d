"""Group protocol at the wire level: refused commits, errors clients expect, admin APIs, CLI,
compaction of a compacted topic through a broker."""

from __future__ import annotations

import asyncio
import datetime
import struct
import time

import pytest
from clients import ConfluentClient, Rec
from dm_broker.protocol.build import make, nested
from dm_broker.protocol.client import KafkaConnection
from dm_broker.protocol.codec import request_class
from group_clients import wait_for, wait_for_async
from harness import run_dm, running_broker
from kio.schema.errors import ErrorCode

pytestmark = pytest.mark.timeout(120)

SUBSCRIPTION = b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"  # consumer protocol v0, topic "t"


def join_req(group: str, member_id: str = "", protocols=(("range", SUBSCRIPTION),), protocol_type="consumer",
             instance_id: str | None = None, session_s: float = 10):
    cls = request_class(11, 5)
    proto = nested(cls, "JoinGroupRequestProtocol")
    return make(cls, group_id=group, session_timeout=datetime.timedelta(seconds=session_s),
                rebalance_timeout=datetime.timedelta(seconds=10), member_id=member_id, group_instance_id=instance_id,
                protocol_type=protocol_type, protocols=tuple(proto(name=n, metadata=m) for n, m in protocols))


def sync_req(group: str, generation: int, member_id: str, assignments: dict[str, bytes]):
    cls = request_class(14, 3)
    a = nested(cls, "SyncGroupRequestAssignment")
    return make(cls, group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None,
                assignments=tuple(a(member_id=m, assignment=v) for m, v in assignments.items()))


def commit_req(group: str, generation: int, member_id: str, topic: str, offset: int, instance_id: str | None = None):
    cls = request_class(8, 7)
    t = nested(cls, "OffsetCommitRequestTopic")
    p = nested(cls, "OffsetCommitRequestPartition")
    return make(cls, group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
                group_instance_id=instance_id, topics=(t(name=topic, partitions=(p(
                    partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                    committed_metadata=f"meta-{offset}"),)),))


def fetch_offsets_req(group: str, topic: str):
    cls = request_class(9, 7)
    t = nested(cls, "OffsetFetchRequestTopic")
    return make(cls, group_id=group, topics=(t(name=topic, partition_indexes=(0,)),), require_stable=False)


async def find_coordinator(conn, group: str) -> None:
    """What every client does first; it also creates __consumer_offsets on first use."""
    for _ in range(100):
        resp = await conn.request(make(request_class(10, 3), key=group, key_type=0))
        if resp.error_code == ErrorCode.none:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"no coordinator for {group}")


async def group_connection(broker, group: str) -> KafkaConnection:
    """A connection to the broker, once it coordinates `group`."""
    conn = await KafkaConnection.open("127.0.0.1", broker.port)
    await find_coordinator(conn, group)
    return conn


async def commit_code(conn, *args) -> ErrorCode:
    resp = await conn.request(commit_req(*args))
    return resp.topics[0].partitions[0].error_code


@pytest.fixture(scope="module")
def gbroker(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("gp") / "data",
                        {"group.initial.rebalance.delay.ms": 0, "log.cleaner.backoff.ms": 200}) as proc:
        yield proc


async def in_state(conn, group: str, state: str) -> bool:
    described = await conn.request(make(request_class(15, 5), groups=(group,), include_authorized_operations=False))
    return described.groups[0].group_state == state


async def test_commits_from_unknown_members_and_stale_generations_are_refused(gbroker, topic_name):
    ConfluentClient(gbroker.bootstrap).create_topic(topic_name, 1)
    group = "wire-" + topic_name
    conn = await group_connection(gbroker, group)
    first = await conn.request(join_req(group))
    assert first.error_code == ErrorCode.member_id_required  # KIP-394
    joined = await conn.request(join_req(group, first.member_id))
    assert joined.error_code == ErrorCode.none and joined.leader == first.member_id
    gen, me = joined.generation_id, joined.member_id
    synced = await conn.request(sync_req(group, gen, me, {me: b"assignment"}))
    assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"assignment")
    assert await commit_code(conn, group, gen, me, topic_name, 42) == ErrorCode.none
    assert await commit_code(conn, group, gen, "intruder", topic_name, 7) == ErrorCode.unknown_member_id
    assert await commit_code(conn, group, gen - 1, me, topic_name, 7) == ErrorCode.illegal_generation
    assert await commit_code(conn, group, -1, "", topic_name, 7) == ErrorCode.unknown_member_id
    fetched = await conn.request(fetch_offsets_req(group, topic_name))
    part = fetched.topics[0].partitions[0]
    assert (part.committed_offset, part.metadata) == (42, "meta-42")  # nothing committed was lost
    hb_cls = request_class(12, 3)
    hb = await conn.request(make(hb_cls, group_id=group, generation_id=gen + 5, member_id=me, group_instance_id=None))
    assert hb.error_code == ErrorCode.illegal_generation
    hb = await conn.request(make(hb_cls, group_id=group, generation_id=gen, member_id="nobody", group_instance_id=None))
    assert hb.error_code == ErrorCode.unknown_member_id
    other = await conn.request(join_req(group, protocol_type="connect"))
    assert other.error_code == ErrorCode.inconsistent_group_protocol
    other = await conn.request(join_req(group, protocols=(("weird", b""),)))
    assert other.error_code in (ErrorCode.inconsistent_group_protocol, ErrorCode.member_id_required)
    await conn.close()


async def test_rebalance_in_progress_and_offsets_only_group(gbroker, topic_name):
    ConfluentClient(gbroker.bootstrap).create_topic(topic_name, 1)
    a = await KafkaConnection.open("127.0.0.1", gbroker.port)
    b = await KafkaConnection.open("127.0.0.1", gbroker.port)
    group = "rip-" + topic_name
    await find_coordinator(a, group)
    first = await a.request(join_req(group))
    joined = await a.request(join_req(group, first.member_id))
    await a.request(sync_req(group, joined.generation_id, joined.member_id, {joined.member_id: b"x"}))
    # a second member starts a rebalance: the first one's heartbeat says so
    second = await b.request(join_req(group))
    pending = asyncio.create_task(b.request(join_req(group, second.member_id)))
    await wait_for_async(lambda: in_state(a, group, "PreparingRebalance"), 10, interval=0.05,
                         what="the rebalance the second join starts")
    hb = await a.request(make(request_class(12, 3), group_id=group, generation_id=joined.generation_id,
                              member_id=joined.member_id, group_instance_id=None))
    assert hb.error_code == ErrorCode.rebalance_in_progress
    rejoin = await a.request(join_req(group, joined.member_id))
    assert rejoin.error_code == ErrorCode.none and rejoin.generation_id == joined.generation_id + 1
    assert len(rejoin.members) == 2  # the leader gets everyone's subscription
    assert (await pending).generation_id == rejoin.generation_id
    # a consumer using assign() commits with generation -1 into a group of its own
    standalone = "solo-" + topic_name
    await find_coordinator(a, standalone)
    assert await commit_code(a, standalone, -1, "", topic_name, 5) == ErrorCode.none
    await a.close()
    await b.close()


async def test_a_commit_refuses_unknown_partitions_and_long_metadata_and_stores_the_rest(gbroker, topic_name):
    """Each partition of an OffsetCommit is answered on its own, as Kafka does: an unknown topic or
    partition and metadata over offset.metadata.max.bytes (4096) are refused, the others stored."""
    ConfluentClient(gbroker.bootstrap).create_topic(topic_name, 2)
    group = "refusals-" + topic_name
    conn = await group_connection(gbroker, group)
    cls = request_class(8, 7)
    t, p = nested(cls, "OffsetCommitRequestTopic"), nested(cls, "OffsetCommitRequestPartition")

    def part(index: int, offset: int, metadata: str):
        return p(partition_index=index, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=metadata)

    resp = await conn.request(make(cls, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                   group_instance_id=None, topics=(
        t(name=topic_name, partitions=(part(0, 10, "ok"), part(1, 11, "x" * 4097), part(2, 12, "no such"))),
        t(name=topic_name + "-absent", partitions=(part(0, 13, ""),)))))
    codes = {(topic.name, q.partition_index): q.error_code for topic in resp.topics for q in topic.partitions}
    assert codes == {(topic_name, 0): ErrorCode.none, (topic_name, 1): ErrorCode.offset_metadata_too_large,
                     (topic_name, 2): ErrorCode.unknown_topic_or_partition,
                     (topic_name + "-absent", 0): ErrorCode.unknown_topic_or_partition}
    fetch_cls = request_class(9, 7)
    fetched = await conn.request(make(fetch_cls, group_id=group, require_stable=False, topics=(
        nested(fetch_cls, "OffsetFetchRequestTopic")(name=topic_name, partition_indexes=(0, 1)),)))
    stored = {q.partition_index: (q.committed_offset, q.metadata) for q in fetched.topics[0].partitions}
    assert stored == {0: (10, "ok"), 1: (-1, "")}  # the refused one stored nothing
    await conn.close()


async def test_a_static_member_replaced_by_its_instance_id_is_fenced(gbroker, topic_name):
    """KIP-345: a new JoinGroup with a known group.instance.id and no member id takes the old member's
    place; the old member's heartbeat, commit and rejoin are answered FENCED_INSTANCE_ID. A session
    timeout outside group.min/max.session.timeout.ms is refused before anything else."""
    ConfluentClient(gbroker.bootstrap).create_topic(topic_name, 1)
    group = "static-" + topic_name
    conn = await group_connection(gbroker, group)
    short = await conn.request(join_req(group, session_s=1))  # group.min.session.timeout.ms is 6 s
    assert short.error_code == ErrorCode.invalid_session_timeout
    old = await conn.request(join_req(group, instance_id="i-1"))
    assert old.error_code == ErrorCode.none and old.member_id  # a static member gets its id at once
    await conn.request(sync_req(group, old.generation_id, old.member_id, {old.member_id: b"a"}))
    new = await conn.request(join_req(group, instance_id="i-1"))
    assert new.error_code == ErrorCode.none and new.member_id != old.member_id
    hb_cls = request_class(12, 3)
    hb = await conn.request(make(hb_cls, group_id=group, generation_id=old.generation_id, member_id=old.member_id,
                                 group_instance_id="i-1"))
    assert hb.error_code == ErrorCode.fenced_instance_id
    assert await commit_code(conn, group, old.generation_id, old.member_id, topic_name, 3, "i-1") == \
        ErrorCode.fenced_instance_id
    rejoin = await conn.request(join_req(group, member_id=old.member_id, instance_id="i-1"))
    assert rejoin.error_code == ErrorCode.fenced_instance_id
    await conn.close()


async def test_group_max_size_refuses_one_member_too_many(tmp_path, topic_name):
    with running_broker(tmp_path / "data", {"group.initial.rebalance.delay.ms": 0, "group.max.size": 2}) as b:
        ConfluentClient(b.bootstrap).create_topic(topic_name, 1)
        conns = [await KafkaConnection.open("127.0.0.1", b.port) for _ in range(3)]
        group = "small-" + topic_name
        await find_coordinator(conns[0], group)
        first = await conns[0].request(join_req(group, instance_id="a"))
        assert first.error_code == ErrorCode.none
        # the second member's join waits for the rebalance it starts; the first rejoins to finish it
        second = asyncio.create_task(conns[1].request(join_req(group, instance_id="b")))
        await wait_for_async(lambda: in_state(conns[2], group, "PreparingRebalance"), 10, interval=0.05,
                             what="the second join")
        rejoined = await conns[0].request(join_req(group, member_id=first.member_id, instance_id="a"))
        assert rejoined.error_code == ErrorCode.none and len(rejoined.members) == 2
        assert (await second).error_code == ErrorCode.none
        third = await conns[2].request(join_req(group, instance_id="c"))
        assert third.error_code == ErrorCode.group_max_size_reached
        for conn in conns:
            await conn.close()


def subscription(topic: str) -> bytes:
    """Consumer protocol v0 metadata subscribing to one topic (no user data)."""
    return struct.pack(">hih", 0, 1, len(topic)) + topic.encode() + b"\xff\xff\xff\xff"


async def test_offset_delete_keeps_subscribed_topics_and_names_unknown_partitions(gbroker, topic_name):
    """OffsetDelete as Kafka answers it: an unknown group is GROUP_ID_NOT_FOUND; in an active group the
    topics it subscribes to are refused (GROUP_SUBSCRIBED_TO_TOPIC), others deleted; a topic or
    partition the metadata does not have is UNKNOWN_TOPIC_OR_PARTITION."""
    subscribed, other = topic_name, topic_name + "-other"
    for name in (subscribed, other):
        ConfluentClient(gbroker.bootstrap).create_topic(name, 1)
    group = "offdel-" + topic_name
    conn = await group_connection(gbroker, group)
    cls = request_class(47, 0)
    t, p = nested(cls, "OffsetDeleteRequestTopic"), nested(cls, "OffsetDeleteRequestPartition")

    def delete(*targets: tuple[str, int]):
        names = dict.fromkeys(name for name, _ in targets)
        return make(cls, group_id=group, topics=tuple(
            t(name=name, partitions=tuple(p(partition_index=i) for n, i in targets if n == name)) for name in names))

    assert (await conn.request(delete((other, 0)))).error_code == ErrorCode.group_id_not_found
    first = await conn.request(join_req(group, protocols=(("range", subscription(subscribed)),)))
    joined = await conn.request(join_req(group, first.member_id, protocols=(("range", subscription(subscribed)),)))
    gen, me = joined.generation_id, joined.member_id
    await conn.request(sync_req(group, gen, me, {me: b""}))
    assert await commit_code(conn, group, gen, me, subscribed, 5) == ErrorCode.none
    assert await commit_code(conn, group, gen, me, other, 6) == ErrorCode.none
    resp = await conn.request(delete((subscribed, 0), (other, 0), (other, 7), (topic_name + "-absent", 0)))
    assert resp.error_code == ErrorCode.none
    codes = {(topic.name, q.partition_index): q.error_code for topic in resp.topics for q in topic.partitions}
    assert codes == {(subscribed, 0): ErrorCode.group_subscribed_to_topic, (other, 0): ErrorCode.none,
                     (other, 7): ErrorCode.unknown_topic_or_partition,
                     (topic_name + "-absent", 0): ErrorCode.unknown_topic_or_partition}
    kept = (await conn.request(fetch_offsets_req(group, subscribed))).topics[0].partitions[0].committed_offset
    gone = (await conn.request(fetch_offsets_req(group, other))).topics[0].partitions[0].committed_offset
    assert (kept, gone) == (5, -1)
    await conn.close()


# Nine `dm` CLI processes or more (the wait polls `dm groups list`) and a consumer: 4 s on an idle
# machine, 72 s at nice 10 beside four busy loops, past the module's 120 s beside the e2e lane in CI
@pytest.mark.timeout(300)
def test_groups_cli_describe_lag_reset_delete(gbroker, topic_name):
    from confluent_kafka import Consumer

    client = ConfluentClient(gbroker.bootstrap)
    client.create_topic(topic_name, 2)
    client.produce(topic_name, [Rec(None, b"%d" % i, partition=i % 2) for i in range(100)])
    group = "cli-" + topic_name
    consumer = Consumer({"bootstrap.servers": gbroker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "client.id": "lag-checker"})
    consumer.subscribe([topic_name])
    got = 0
    deadline = time.monotonic() + 30
    while got < 60 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got += 1
            if got == 60:
                consumer.commit(asynchronous=False)
    b = ["--bootstrap", gbroker.bootstrap]
    listed = run_dm("groups", "list", *b)
    assert group in listed.stdout and "STABLE" in listed.stdout.upper()
    described = run_dm("groups", "describe", group, *b)
    assert described.returncode == 0, described.stderr
    assert "lag-checker" in described.stdout and "total lag: 40" in described.stdout
    refused = run_dm("groups", "reset-offsets", group, "--topic", topic_name, "--to-earliest", "--execute", *b)
    assert refused.returncode != 0 and "active members" in refused.stderr
    consumer.close()
    wait_for(lambda: "EMPTY" in run_dm("groups", "list", *b).stdout.upper(), what="group empty")
    dry = run_dm("groups", "reset-offsets", group, "--topic", topic_name, "--to-earliest", *b)
    assert "dry run" in dry.stdout
    done = run_dm("groups", "reset-offsets", group, "--topic", topic_name, "--to-earliest", "--execute", *b)
    assert done.returncode == 0, done.stderr
    assert "total lag: 100" in run_dm("groups", "describe", group, *b).stdout
    assert run_dm("groups", "delete", group, *b).returncode == 0
    assert group not in run_dm("groups", "list", *b).stdout


def test_compacted_topic_keeps_latest_value_per_key(gbroker, topic_name):
    client = ConfluentClient(gbroker.bootstrap)
    client.create_topic(topic_name, 1, {"cleanup.policy": "compact", "segment.bytes": "2048",
                                        "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "0"})
    records = [Rec(b"user-%d" % (i % 5), b"state-%d" % i + b"." * 100) for i in range(200)]
    records.append(Rec(b"user-0", None))  # tombstone, past delete.retention.ms=0 at the next pass
    records += [Rec(b"filler", b"." * 150) for _ in range(30)]
    for start in range(0, len(records), 10):  # several batches, so several segments
        client.produce(topic_name, records[start : start + 10])
    wait_for(lambda: "compacted " + topic_name in gbroker.log_tail(2000), timeout=30, what="a compaction pass")
    got = client.consume(topic_name, 10_000, to_end=True)  # everything there is
    latest: dict[bytes, bytes | None] = {}
    for g in got:
        latest[g.key] = g.value
    assert latest[b"user-1"].startswith(b"state-196")
    assert latest[b"user-4"].startswith(b"state-199")
    assert b"user-0" not in latest  # its tombstone outlived delete.retention.ms=0 and is gone too
    offsets = [g.offset for g in got]
    assert offsets == sorted(offsets) and len(offsets) < 231


async def test_compacted_topic_refuses_keyless_records(gbroker, topic_name):
    from dm_broker.log.records import build_batch
    from wire import produce_request

    ConfluentClient(gbroker.bootstrap).create_topic(topic_name, 1, {"cleanup.policy": "compact"})
    conn = await KafkaConnection.open("127.0.0.1", gbroker.port)
    mixed = build_batch([(b"k0", b"a", []), (None, b"b", []), (b"k2", b"c", []), (None, b"d", [])],
                        timestamp_ms=int(time.time() * 1000))
    resp = await conn.request(produce_request(topic_name, 0, mixed))
    partition = resp.responses[0].partition_responses[0]
    assert partition.error_code == ErrorCode.invalid_record
    # KIP-467 (Produce v8+): the records that made the batch fail, by index, each with a reason
    assert [e.batch_index for e in partition.record_errors] == [1, 3]
    assert all("without key" in e.batch_index_error_message for e in partition.record_errors)
    assert "without key" in partition.error_message
    await conn.close()


def test_librdkafka_fails_only_the_keyless_records_of_a_batch(gbroker, topic_name):
    """librdkafka reads the per-record errors: the keyless records fail with INVALID_RECORD, their
    batch-mates with _INVALID_DIFFERENT_RECORD, and nothing of the batch is written."""
    from confluent_kafka import KafkaError as CKError
    from confluent_kafka import Producer

    ConfluentClient(gbroker.bootstrap).create_topic(topic_name, 1, {"cleanup.policy": "compact"})
    # Each batch of ten leaves when its tenth record is in (batch.num.messages), not on a timer: a test
    # process short of CPU once took over linger.ms between two produce() calls, and librdkafka sent the
    # first record on its own (make test at fbdb5ee).
    producer = Producer({"bootstrap.servers": gbroker.bootstrap, "linger.ms": 30000, "batch.num.messages": 10,
                         "retries": 0})
    # The topic's partitions known before the first produce(): a record for a topic librdkafka has no
    # metadata for waits in its unassigned queue, and when the metadata comes after flush() has begun the
    # records move to the partition one at a time while flushing sends whatever is there — the first
    # record alone (seen once in the suite at 265b922).
    def leader_known() -> bool:
        partitions = producer.list_topics(topic_name, timeout=5).topics[topic_name].partitions
        return 0 in partitions and partitions[0].leader >= 0

    wait_for(leader_known, 15, what=f"librdkafka to know {topic_name}'s leader")
    errors: dict[int, int] = {}

    def delivered(err, msg) -> None:
        errors[int(msg.value())] = err.code() if err else 0

    for first in (0, 10):  # two batches of ten, each with two keyless records
        for i in range(first, first + 10):
            producer.produce(topic_name, b"%d" % i, key=None if i % 5 == 0 else b"k%d" % i, on_delivery=delivered)
        assert producer.flush(15) == 0
    assert {i for i, code in errors.items() if code == CKError.INVALID_RECORD} == {0, 5, 10, 15}, errors
    assert all(code == CKError._INVALID_DIFFERENT_RECORD for i, code in errors.items() if i % 5), errors
    assert ConfluentClient(gbroker.bootstrap).consume(topic_name, 1, to_end=True) == []
