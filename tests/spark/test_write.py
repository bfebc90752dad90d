"""Writes through format("dm") (Spark's Kafka sink columns), read back with Spark and a Kafka client."""

from __future__ import annotations

import threading

import pytest
from helpers import create_topic, produce, read, recover_the_session, rows

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


def _write_values(spark, bootstrap: str, topic: str, count: int, prefix: str) -> None:
    """`count` records valued prefix0, prefix1, …; from spark.range, which (unlike createDataFrame of local
    rows) leaves the calling thread's active session as it found it."""
    spark.range(count).selectExpr(f"CONCAT('{prefix}', id) AS value").write.format("dm") \
        .option("kafka.bootstrap.servers", bootstrap).option("topic", topic).mode("append").save()


def _in_a_thread(work) -> BaseException | None:
    """Runs `work` in a new Python thread (served by a JVM thread of its own); what it raised, if anything."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # handed to the test's own thread
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(300)
    assert not thread.is_alive(), "the thread's write did not finish"
    return raised[0] if raised else None


def test_a_write_from_another_thread_needs_use_in_this_thread(spark, broker, topic_name) -> None:
    """Spark finds a Python data source for a write through the JVM thread's active session (docs/spark.md).
    Whether the JVM thread serving a new Python thread has one depends on which py4j connection it was
    given and on what ran there before (createDataFrame of local rows sets it), so the thread here first
    clears it, as a fresh connection has none: the write is refused as DATA_SOURCE_NOT_FOUND, and after
    pyspark_dm.use_in_this_thread the records arrive."""
    import pyspark_dm

    create_topic(broker.bootstrap, topic_name, 1)
    outcome: dict[str, BaseException | None] = {}

    def write_without_then_with() -> None:
        spark._jvm.SparkSession.clearActiveSession()
        try:
            _write_values(spark, broker.bootstrap, topic_name, 1, "lost")
            outcome["without"] = None
        except Exception as exc:  # what Spark said is the test's subject
            outcome["without"] = exc
        pyspark_dm.use_in_this_thread(spark)
        _write_values(spark, broker.bootstrap, topic_name, 3, "v")

    assert _in_a_thread(write_without_then_with) is None
    refused = outcome["without"]
    assert refused is not None and "DATA_SOURCE_NOT_FOUND" in str(refused), (
        f"Spark now finds format('dm') without an active session ({refused!r}): use_in_this_thread can go")
    assert sorted(v for _, _, _, v in rows(read(spark, broker.bootstrap, topic_name))) == [b"v0", b"v1", b"v2"]


def test_writes_work_after_the_session_is_recovered_from_a_failed_test(spark, broker, topic_name) -> None:
    """The recovery after a failed Spark test (a new py4j connection, so a new JVM thread) leaves the worker's
    session usable for writes, not only reads."""
    create_topic(broker.bootstrap, topic_name, 1)
    recover_the_session()
    _write_values(spark, broker.bootstrap, topic_name, 1, "after")
    assert [v for _, _, _, v in rows(read(spark, broker.bootstrap, topic_name))] == [b"after0"]
