"""No topic setting is silently ignored (issue 30): compression.type makes the leader store batches with
the topic's codec (read back by three clients), the KIP-937 timestamp window refuses records with
INVALID_TIMESTAMP, Kafka settings dm does not implement are refused with INVALID_CONFIG naming them,
and an explicit override equal to the default is reported as the topic's own (DYNAMIC_TOPIC_CONFIG)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from dm_broker.log.records import iter_batches

pytestmark = pytest.mark.timeout(180)
CODEC_IDS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def create(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until its future ends
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(15)


def stored_codecs(data_dir: Path, topic: str) -> list[int]:
    """The codec of every batch in the partition's segment files, as they are on disk."""
    codecs = []
    for segment in sorted((data_dir / f"{topic}-0").glob("*.log")):
        codecs += [header.compression for _, header in iter_batches(segment.read_bytes())]
    return codecs


def produce(bootstrap: str, topic: str, values: list[bytes], **config) -> list[str]:
    errors: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 10000, **config})
    for i, v in enumerate(values):
        p.produce(topic, v, key=b"k%d" % i, on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
    p.flush(15)
    return errors


@pytest.mark.parametrize(("stored", "sent"), [("zstd", "none"), ("uncompressed", "gzip"), ("lz4", "snappy"),
                                              ("gzip", "zstd")])
def test_the_leader_stores_the_topics_codec(broker, topic_name, stored, sent):
    from clients import AioKafkaClient, ConfluentClient, KafkaPythonClient

    create(broker.bootstrap, topic_name, {"compression.type": stored, "compression.zstd.level": "7",
                                          "compression.gzip.level": "9"})
    values = [b"value-%d-" % i + b"x" * 200 for i in range(300)]
    assert produce(broker.bootstrap, topic_name, values, **{"compression.type": sent}) == []
    codecs = set(stored_codecs(broker.data_dir, topic_name))
    assert codecs == {CODEC_IDS[stored]}, codecs
    for client in (ConfluentClient, KafkaPythonClient, AioKafkaClient):
        got = client(broker.bootstrap).consume(topic_name, len(values))
        assert [g.value for g in got] == values, client.__name__


def test_producer_keeps_what_came(broker, topic_name):
    create(broker.bootstrap, topic_name, {})
    assert produce(broker.bootstrap, topic_name, [b"a" * 100] * 50, **{"compression.type": "lz4"}) == []
    assert set(stored_codecs(broker.data_dir, topic_name)) == {CODEC_IDS["lz4"]}


def test_the_timestamp_window_refuses_records_outside_it(broker, topic_name):
    create(broker.bootstrap, topic_name, {"message.timestamp.after.max.ms": "60000",
                                          "message.timestamp.before.max.ms": "3600000"})
    now = int(time.time() * 1000)
    errors: list[str] = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 10000, "linger.ms": 0})
    report = lambda err, _m: errors.append(str(err) if err else "ok")  # noqa: E731
    p.produce(topic_name, b"now", timestamp=now, on_delivery=report)
    p.flush(10)
    p.produce(topic_name, b"future", timestamp=now + 3_600_000, on_delivery=report)
    p.flush(10)
    p.produce(topic_name, b"past", timestamp=now - 7_200_000, on_delivery=report)
    p.flush(10)
    assert errors[0] == "ok"
    assert all("INVALID_TIMESTAMP" in e or "timestamp" in e.lower() for e in errors[1:]), errors
    # LogAppendTime topics take the broker's time: nothing to check
    other = topic_name + "-append"
    create(broker.bootstrap, other, {"message.timestamp.type": "LogAppendTime",
                                     "message.timestamp.after.max.ms": "60000"})
    errors.clear()
    p.produce(other, b"future", timestamp=now + 3_600_000, on_delivery=report)
    p.flush(10)
    assert errors == ["ok"]


@pytest.mark.parametrize(("name", "value"), [("remote.storage.enable", "true"),
                                             ("message.format.version", "banana"),
                                             ("compression.gzip.level", "0")])
def test_settings_dm_does_not_implement_are_refused(broker, topic_name, name, value):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with pytest.raises(KafkaException, match=rf"INVALID_CONFIG|{name}") as refused:
        admin.create_topics([NewTopic(topic_name, 1, 1, config={name: value})])[topic_name].result(15)
    assert name in str(refused.value)
    create(broker.bootstrap, topic_name, {})
    resource = ConfigResource("topic", topic_name, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException, match=name):
        admin.incremental_alter_configs([resource])[resource].result(15)


@pytest.mark.parametrize(("name", "value"), [("file.delete.delay.ms", "12345"), ("message.format.version", "0.10.0.0"),
                                             ("preallocate", "true"), ("segment.jitter.ms", "1000")])
def test_settings_no_client_can_tell_are_stored_as_kafka_stores_them(broker, topic_name, name, value):
    """Kafka accepts these and reads them back as the topic's own (DYNAMIC_TOPIC_CONFIG); their effect is not
    on the wire, so dm stores them, returns them and documents them as having none (issue 65: the rule against
    silently ignored settings refused them, and Kafka clients' own test suites failed on it)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1, config={name: value})])[topic_name].result(15)
    resource = ConfigResource("topic", topic_name)
    entry = admin.describe_configs([resource])[resource].result(15)[name]
    assert entry.value == value and entry.source == 1 and not entry.is_default
    changed = ConfigResource("topic", topic_name, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([changed])[changed].result(15)


def test_defaults_of_unimplemented_settings_stay_accepted(broker, topic_name):
    create(broker.bootstrap, topic_name, {"preallocate": "false", "segment.jitter.ms": "0",
                                          "message.format.version": "3.0-IV1",
                                          "message.downconversion.enable": "false"})


def test_an_explicit_override_equal_to_the_default_is_the_topics_own(broker, topic_name):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    create(broker.bootstrap, topic_name, {"min.insync.replicas": "1"})
    resource = ConfigResource("topic", topic_name)
    entry = admin.describe_configs([resource])[resource].result(15)["min.insync.replicas"]
    assert entry.source == 1 and not entry.is_default  # DYNAMIC_TOPIC_CONFIG
    other = ConfigResource("topic", topic_name, incremental_configs=[
        ConfigEntry("retention.ms", "604800000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([other])[other].result(15)
    entry = admin.describe_configs([resource])[resource].result(15)["retention.ms"]
    assert entry.source == 1 and entry.value == "604800000"
