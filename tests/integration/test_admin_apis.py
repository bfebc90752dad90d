"""The admin APIs from the three Python clients: DeleteRecords, ElectLeaders, DescribeLogDirs and
AlterReplicaLogDirs (JBOD), AlterConfigs and IncrementalAlterConfigs (APPEND/SUBTRACT), broker
DescribeConfigs with sources and synonyms, accepted-but-ignored topic configs, ListOffsets
MAX_TIMESTAMP. Reassignments are in tests/chaos/test_reassignment.py."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from clients import ConfluentClient, Rec
from harness import BrokerProcess


@pytest.fixture(scope="module")
def jbod(tmp_path_factory) -> BrokerProcess:
    base = tmp_path_factory.mktemp("jbod")
    broker = BrokerProcess(base / "d1", {"log.dirs": f"{base / 'd1'},{base / 'd2'}"})
    broker.start()
    yield broker
    assert broker.alive(), broker.log_tail()
    broker.stop()


def confluent_admin(broker: BrokerProcess):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": broker.bootstrap})


def test_create_topics_accepts_every_standard_topic_config(jbod):
    from confluent_kafka.admin import ConfigResource, NewTopic

    admin = confluent_admin(jbod)
    # every one accepted, stored and described (settings dm does not implement take only values that
    # change nothing: tests/integration/test_topic_settings_enforced.py)
    configs = {"compression.type": "zstd", "message.timestamp.type": "LogAppendTime", "preallocate": "false",
               "unclean.leader.election.enable": "false", "message.downconversion.enable": "true",
               "follower.replication.throttled.replicas": "0:0"}
    admin.create_topics([NewTopic("cfg", 1, 1, config=configs)])["cfg"].result(15)
    described = admin.describe_configs([ConfigResource("topic", "cfg")])
    entries = next(iter(described.values())).result(15)
    for name, value in configs.items():
        assert entries[name].value == value, name
    refused = admin.create_topics([NewTopic("tiered", 1, 1, config={"remote.storage.enable": "true"})])
    with pytest.raises(Exception, match=r"remote\.storage\.enable|[Tt]iered"):
        refused["tiered"].result(15)


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")  # the older API, on purpose
def test_incremental_append_and_subtract_and_the_older_alter_configs(jbod):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    admin = confluent_admin(jbod)
    admin.create_topics([NewTopic("lists", 1, 1)])["lists"].result(15)
    resource = ConfigResource("topic", "lists", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    admin.incremental_alter_configs([resource])[resource].result(15)

    def policy() -> str:
        res = ConfigResource("topic", "lists")
        return admin.describe_configs([res])[res].result(15)["cleanup.policy"].value

    assert policy() == "delete,compact"
    resource = ConfigResource("topic", "lists", incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)])
    admin.incremental_alter_configs([resource])[resource].result(15)
    assert policy() == "compact"

    # AlterConfigs (API 33) replaces the topic's whole set of overrides. kafka-python sends the
    # overrides it read back along with the change; confluent-kafka sends only what it is given.
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType

    kadmin = KafkaAdminClient(bootstrap_servers=jbod.bootstrap)
    try:
        kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "lists", configs={"retention.ms": "60000"})],
                             incremental=False)
    finally:
        kadmin.close()
    res = ConfigResource("topic", "lists")
    entries = admin.describe_configs([res])[res].result(15)
    assert (entries["retention.ms"].value, entries["cleanup.policy"].value) == ("60000", "compact")
    replace = ConfigResource("topic", "lists", set_config={"retention.ms": "120000"})
    admin.alter_configs([replace])[replace].result(15)
    entries = admin.describe_configs([res])[res].result(15)
    assert entries["retention.ms"].value == "120000"
    assert entries["cleanup.policy"].value == "delete"  # the override is gone: back to the default


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")  # the older API, on purpose
def test_broker_configs_have_sources_and_synonyms_and_advertised_listeners(jbod):
    from confluent_kafka.admin import ConfigResource, ConfigSource

    admin = confluent_admin(jbod)
    res = ConfigResource("broker", "0")
    entries = admin.describe_configs([res], include_synonyms=True)[res].result(15) if _has_synonyms_arg() else \
        admin.describe_configs([res])[res].result(15)
    assert entries["advertised.listeners"].value == f"PLAINTEXT://{jbod.bootstrap}"
    assert entries["broker.id"].value == "0"
    assert "log.dirs" in entries and "," in entries["log.dirs"].value
    retention = entries["log.retention.ms"]
    assert retention.source == ConfigSource.DEFAULT_CONFIG.value
    assert len(entries) > 40
    # A dynamic config set for this broker shows as such, with the static default as a synonym.
    alter = ConfigResource("broker", "0", set_config={"leader.replication.throttled.rate": "1000000"})
    admin.alter_configs([alter])[alter].result(15)
    rate = admin.describe_configs([res])[res].result(15)["leader.replication.throttled.rate"]
    assert rate.value == "1000000" and rate.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    bad = ConfigResource("broker", "0", set_config={"log.retention.ms": "1"})
    with pytest.raises(Exception, match="not changeable at run time"):
        admin.alter_configs([bad])[bad].result(15)


def _has_synonyms_arg() -> bool:
    import inspect

    from confluent_kafka.admin import AdminClient

    return "include_synonyms" in str(inspect.signature(AdminClient.describe_configs))


def test_delete_records_from_all_three_clients(jbod):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import NewTopic

    admin = confluent_admin(jbod)
    admin.create_topics([NewTopic("del", 3, 1, config={"segment.bytes": "2000"})])["del"].result(15)
    for chunk in range(10):  # several batches, so several 2000-byte segments
        ConfluentClient(jbod.bootstrap).produce("del", [Rec(None, b"v%03d" % i + b"." * 100, partition=i % 3)
                                                        for i in range(chunk * 30, chunk * 30 + 30)])
    segments_before = len(list((jbod.data_dir / "del-0").glob("*.log")) or
                          list((jbod.data_dir.parent / "d2" / "del-0").glob("*.log")))

    # confluent-kafka
    result = admin.delete_records([TopicPartition("del", 0, 60)])
    assert next(iter(result.values())).result(15).low_watermark == 60
    # kafka-python
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP

    kadmin = KafkaAdminClient(bootstrap_servers=jbod.bootstrap)
    try:
        out = kadmin.delete_records({KTP("del", 1): 30})
        assert out[KTP("del", 1)]["low_watermark"] == 30
    finally:
        kadmin.close()

    # aiokafka
    async def with_aiokafka() -> int:
        from aiokafka import TopicPartition as ATP
        from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

        client = AIOKafkaAdminClient(bootstrap_servers=jbod.bootstrap)
        await client.start()
        try:
            res = await client.delete_records({ATP("del", 2): RecordsToDelete(before_offset=-1)})
            return res[ATP("del", 2)]
        finally:
            await client.close()

    assert asyncio.run(with_aiokafka()) == 100  # -1: everything up to the high watermark

    # Consumers and ListOffsets see the new log start; segments below it are gone.
    from confluent_kafka import OFFSET_BEGINNING, Consumer

    consumer = Consumer({"bootstrap.servers": jbod.bootstrap, "group.id": "del-check"})
    low, high = consumer.get_watermark_offsets(TopicPartition("del", 0), timeout=10)
    assert (low, high) == (60, 100)
    consumer.assign([TopicPartition("del", 0, OFFSET_BEGINNING)])
    first = None
    deadline = time.monotonic() + 15
    while first is None and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            first = msg.offset()
    consumer.close()
    assert first == 60
    part_dir = next(d / "del-0" for d in (jbod.data_dir, jbod.data_dir.parent / "d2") if (d / "del-0").exists())
    assert len(list(part_dir.glob("*.log"))) < segments_before
    beyond = admin.delete_records([TopicPartition("del", 0, 1000)])
    with pytest.raises(Exception, match="OFFSET_OUT_OF_RANGE"):
        next(iter(beyond.values())).result(15)


def test_list_offsets_max_timestamp_is_the_record_not_the_batch_end(jbod):
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import NewTopic, OffsetSpec

    admin = confluent_admin(jbod)
    admin.create_topics([NewTopic("ts", 1, 1)])["ts"].result(15)
    producer = Producer({"bootstrap.servers": jbod.bootstrap, "linger.ms": 200})
    base = int(time.time() * 1000) - 60_000
    for i, ts in enumerate([base, base + 5000, base + 1000, base + 2000]):  # the maximum is the 2nd record
        producer.produce("ts", b"r%d" % i, partition=0, timestamp=ts)
    producer.flush(15)
    result = admin.list_offsets({TopicPartition("ts", 0): OffsetSpec.max_timestamp()})
    info = next(iter(result.values())).result(15)
    assert (info.offset, info.timestamp) == (1, base + 5000)


def test_elect_leaders_and_log_dirs(jbod):
    from confluent_kafka import ElectionType, TopicPartition
    from confluent_kafka.admin import NewTopic

    admin = confluent_admin(jbod)
    admin.create_topics([NewTopic("dirs", 4, 1)])["dirs"].result(15)
    ConfluentClient(jbod.bootstrap).produce("dirs", [Rec(None, b"x" * 100, partition=i % 4) for i in range(400)])
    # One broker: every partition is led by its preferred replica already.
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("dirs", 0)]).result(15)
    err = result[TopicPartition("dirs", 0)]
    assert err is None or "ELECTION_NOT_NEEDED" in str(err)

    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartitionReplica

    kadmin = KafkaAdminClient(bootstrap_servers=jbod.bootstrap)
    try:
        dirs = {d["log_dir"]: d for d in kadmin.describe_log_dirs()[0]["log_dirs"]}
        d1, d2 = str(jbod.data_dir), str(jbod.data_dir.parent / "d2")
        assert set(dirs) == {d1, d2}

        def where(partition: int) -> str:
            for path, d in {x["log_dir"]: x for x in kadmin.describe_log_dirs()[0]["log_dirs"]}.items():
                for t in d["topics"]:
                    if t["name"] == "dirs" and any(p["partition_index"] == partition and not p["is_future_key"]
                                                   for p in t["partitions"]):
                        return path
            raise AssertionError(f"dirs-{partition} is in no log dir")

        placed = [where(p) for p in range(4)]
        assert set(placed) == {d1, d2}, "partitions are spread over the log dirs"
        for p in range(4):  # each partition's files (partition.metadata too) in its one directory
            assert [d for d in (d1, d2) if (Path(d) / f"dirs-{p}").exists()] == [placed[p]]
        source = placed[0]
        target = d2 if source == d1 else d1
        errors = kadmin.alter_replica_log_dirs({TopicPartitionReplica("dirs", 0, 0): target})
        assert all(e.__name__ == "NoError" for e in errors.values()), errors
        assert where(0) == target
        assert not (Path(source) / "dirs-0").exists()
        missing = kadmin.alter_replica_log_dirs({TopicPartitionReplica("dirs", 1, 0): "/nowhere"})
        assert any("LogDirNotFound" in e.__name__ for e in missing.values()), missing
    finally:
        kadmin.close()
    got = ConfluentClient(jbod.bootstrap).consume("dirs", 400, timeout=30)
    assert len([g for g in got if g.partition == 0]) == 100


def test_aiokafka_describes_and_alters_configs(jbod):
    async def run() -> tuple[dict, dict]:
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic
        from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

        client = AIOKafkaAdminClient(bootstrap_servers=jbod.bootstrap)
        await client.start()
        try:
            await client.create_topics([NewTopic("aio", 1, 1)])
            await client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "aio",
                                                       configs={"retention.bytes": "123456"})])
            responses = await client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "aio"),
                                                       ConfigResource(ConfigResourceType.BROKER, "0")])
            # Each resource: (error_code, error_message, type, name, entries); an entry: (name, value, ...).
            found = {r[2]: {e[0]: e[1] for e in r[4]} for response in responses for r in response.resources}
            return found[ConfigResourceType.TOPIC.value], found[ConfigResourceType.BROKER.value]
        finally:
            await client.close()

    topic, broker = asyncio.run(run())
    assert topic["retention.bytes"] == "123456"
    assert broker["advertised.listeners"] == f"PLAINTEXT://{jbod.bootstrap}"


def test_one_create_topics_request_of_many_topics(jbod):
    # The topics of one request are created side by side (and their logs in the I/O threads): each still
    # gets its own answer, in request order, a repeated name is refused without stopping the rest, and
    # the new logs are spread over both log directories.
    from dm_broker.protocol.client import KafkaConnection
    from kio.schema.errors import ErrorCode
    from wire import create_topics_request

    names = [f"many-{i}" for i in range(8)]

    async def run():
        conn = await KafkaConnection.open("127.0.0.1", jbod.port)
        try:
            return await conn.request(create_topics_request([*names[:4], names[1], *names[4:]], partitions=5))
        finally:
            await conn.close()

    resp = asyncio.run(run())
    assert [t.name for t in resp.topics] == [*names[:4], names[1], *names[4:]]
    assert [t.error_code for t in resp.topics] == [ErrorCode.none] * 4 + [ErrorCode.invalid_request] + \
        [ErrorCode.none] * 4
    assert all(t.num_partitions == 5 for i, t in enumerate(resp.topics) if i != 4)
    from kafka import KafkaAdminClient

    kadmin = KafkaAdminClient(bootstrap_servers=jbod.bootstrap)
    try:
        held = {d["log_dir"]: {(t["name"], p["partition_index"]) for t in d["topics"] for p in t["partitions"]
                               if not p["is_future_key"]}
                for d in kadmin.describe_log_dirs()[0]["log_dirs"]}
    finally:
        kadmin.close()
    # each new log went to the directory holding fewer partitions, counting those placed before it
    assert abs(len(held[str(jbod.data_dir)]) - len(held[str(jbod.data_dir.parent / "d2")])) <= 1, \
        {d: len(h) for d, h in held.items()}
    for name in names:
        for p in range(5):
            path = next(Path(d) for d, h in held.items() if (name, p) in h) / f"{name}-{p}"
            assert (path / "partition.metadata").read_text().strip(), path  # its topic id, written durably
