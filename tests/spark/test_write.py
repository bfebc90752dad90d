"""Writes through format("dm") (Spark's Kafka sink columns), read back with Spark and a Kafka client."""

from __future__ import annotations

import pytest
from helpers import create_topic, produce, read, rows

pytestmark = pytest.mark.spark


def test_batch_write_then_read_back(spark, broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, 3)
    df = spark.range(1000).selectExpr("CAST(id AS STRING) AS key", "CONCAT('value-', id) AS value")
    df.write.format("dm").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic_name) \
        .mode("append").save()
    got = rows(read(spark, broker.bootstrap, topic_name))
    assert sorted((k, v) for _, _, k, v in got) == sorted((str(i).encode(), f"value-{i}".encode()) for i in range(1000))
    # keyed records follow dm's default partitioner: murmur3(key) % partitions
    import mmh3

    assert all(p == mmh3.hash(k, signed=False) % 3 for p, _, k, _ in got)


def test_write_columns_topic_partition_headers(spark, broker, topic_name) -> None:
    other = topic_name + "-b"
    create_topic(broker.bootstrap, topic_name, 2)
    create_topic(broker.bootstrap, other, 2)
    df = spark.createDataFrame(
        [(topic_name, 1, b"k1", b"v1", [("h", b"1")]), (other, 0, None, b"v2", []), (topic_name, 0, b"k3", None, None)],
        "topic string, partition int, key binary, value binary, headers array<struct<key:string,value:binary>>")
    df.write.format("dm").option("kafka.bootstrap.servers", broker.bootstrap).mode("append").save()
    first = read(spark, broker.bootstrap, topic_name, includeHeaders="true").collect()
    by_partition = {r.partition: r for r in first}
    assert bytes(by_partition[1].value) == b"v1" and [(h.key, bytes(h.value)) for h in by_partition[1].headers] == [
        ("h", b"1")]
    assert by_partition[0].value is None and bytes(by_partition[0].key) == b"k3"
    second = read(spark, broker.bootstrap, other).collect()
    assert [(r.partition, r.key, bytes(r.value)) for r in second] == [(0, None, b"v2")]


def test_streaming_write_copies_a_topic(spark, broker, topic_name, tmp_path) -> None:
    target = topic_name + "-copy"
    create_topic(broker.bootstrap, topic_name, 2)
    create_topic(broker.bootstrap, target, 2)
    produce(broker.bootstrap, topic_name, [(i % 2, f"k{i}".encode(), f"v{i}".encode()) for i in range(500)])
    source = (spark.readStream.format("dm").option("kafka.bootstrap.servers", broker.bootstrap)
              .option("subscribe", topic_name).option("startingOffsets", "earliest").load())
    q = (source.select("key", "value", "partition").writeStream.format("dm")
         .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", target)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert rows(read(spark, broker.bootstrap, target)) == rows(read(spark, broker.bootstrap, topic_name))


def test_producer_options_pass_through(spark, broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    df = spark.range(10).selectExpr("CAST(id AS STRING) AS value")
    (df.write.format("dm").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic_name)
     .option("kafka.compression.type", "zstd").mode("append").save())
    assert read(spark, broker.bootstrap, topic_name).count() == 10
    with pytest.raises(Exception, match=r"kafka\.\*"):
        (df.write.format("dm").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic_name)
         .option("kafka.compression.type", "brotli").mode("append").save())
