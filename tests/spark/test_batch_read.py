"""Batch reads through format("dm") on real Spark against a real broker."""

from __future__ import annotations

import json

import pytest
from helpers import add_partitions, create_topic, produce, read, rows

pytestmark = pytest.mark.spark


def value(p: int, i: int) -> bytes:
    return f"p{p}-{i}".encode()


@pytest.fixture
def filled(broker, topic_name) -> str:
    create_topic(broker.bootstrap, topic_name, 3)
    produce(broker.bootstrap, topic_name, [(p, f"k{i}".encode(), value(p, i)) for p in range(3) for i in range(100)])
    return topic_name


def test_reads_everything_by_default_with_spark_kafka_columns(spark, broker, filled) -> None:
    df = read(spark, broker.bootstrap, filled)
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    got = rows(df)
    assert got == sorted((p, i, f"k{i}".encode(), value(p, i)) for p in range(3) for i in range(100))
    first = df.where("partition = 0 and offset = 0").collect()[0]
    assert first.topic == filled and first.timestampType == 0 and first.timestamp is not None


def test_reads_chosen_offset_ranges(spark, broker, filled) -> None:
    starting = json.dumps({filled: {"0": 10, "1": -2, "2": 95}})
    ending = json.dumps({filled: {"0": 20, "1": 5, "2": -1}})
    got = rows(read(spark, broker.bootstrap, filled, startingOffsets=starting, endingOffsets=ending))
    want = [(0, i, f"k{i}".encode(), value(0, i)) for i in range(10, 20)]
    want += [(1, i, f"k{i}".encode(), value(1, i)) for i in range(5)]
    want += [(2, i, f"k{i}".encode(), value(2, i)) for i in range(95, 100)]
    assert got == sorted(want)


def test_min_partitions_splits_ranges_without_changing_the_rows(spark, broker, filled) -> None:
    df = read(spark, broker.bootstrap, filled, minPartitions="12")
    assert df.rdd.getNumPartitions() >= 12
    assert len(rows(df)) == 300 and len({(p, o) for p, o, _, _ in rows(df)}) == 300


def test_subscribe_pattern_and_assign(spark, broker, filled) -> None:
    df = (spark.read.format("dm").option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribePattern", filled[:8] + ".*").load())
    assert {r.topic for r in df.select("topic").distinct().collect()} >= {filled}
    assigned = (spark.read.format("dm").option("bootstrap.servers", broker.bootstrap)
                .option("assign", json.dumps({filled: [1]})).load())
    assert {r.partition for r in assigned.select("partition").distinct().collect()} == {1}
    assert assigned.count() == 100


def test_starting_timestamp(spark, broker, topic_name) -> None:
    import time

    create_topic(broker.bootstrap, topic_name, 1)
    produce(broker.bootstrap, topic_name, [(0, None, b"old")])
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    produce(broker.bootstrap, topic_name, [(0, None, b"new")])
    got = read(spark, broker.bootstrap, topic_name, startingTimestamp=str(cut)).collect()
    assert [bytes(r.value) for r in got] == [b"new"]
    with pytest.raises(Exception, match="startingTimestamp"):
        read(spark, broker.bootstrap, topic_name, startingTimestamp=str(cut + 3_600_000)).collect()
    late = read(spark, broker.bootstrap, topic_name, startingTimestamp=str(cut + 3_600_000),
                startingOffsetsByTimestampStrategy="latest")
    assert late.count() == 0


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches(spark, broker, topic_name, codec) -> None:
    create_topic(broker.bootstrap, topic_name, 2)
    records = [(i % 2, f"key-{i}".encode(), (f"value-{i}-" * 20).encode()) for i in range(2000)]
    produce(broker.bootstrap, topic_name, records, compression=codec)
    got = rows(read(spark, broker.bootstrap, topic_name))
    assert sorted((k, v) for _, _, k, v in got) == sorted((k, v) for _, k, v in records)
    assert [o for p, o, _, _ in got if p == 0] == list(range(1000))


def test_headers_and_null_keys_and_values(spark, broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    headers = [[("trace", b"abc"), ("n", str(i).encode())] if i % 2 else [] for i in range(10)]
    records = [(0, None if i % 3 == 0 else f"k{i}".encode(), None if i == 4 else f"v{i}".encode()) for i in range(10)]
    produce(broker.bootstrap, topic_name, records, headers=headers)
    df = read(spark, broker.bootstrap, topic_name, includeHeaders="true")
    assert df.columns[-1] == "headers"
    got = sorted(df.collect(), key=lambda r: r.offset)
    assert [[(h.key, bytes(h.value)) for h in r.headers] for r in got] == headers
    assert [None if r.key is None else bytes(r.key) for r in got] == [k for _, k, _ in records]
    assert [None if r.value is None else bytes(r.value) for r in got] == [v for _, _, v in records]
    assert "headers" not in read(spark, broker.bootstrap, topic_name).columns


def test_new_partitions_are_read(spark, broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    produce(broker.bootstrap, topic_name, [(0, None, b"a")])
    add_partitions(broker.bootstrap, topic_name, 2)
    produce(broker.bootstrap, topic_name, [(1, None, b"b")])
    assert sorted(bytes(r.value) for r in read(spark, broker.bootstrap, topic_name).collect()) == [b"a", b"b"]
