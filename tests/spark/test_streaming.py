"""Structured Streaming reads through format("dm"): triggers, limits, checkpoints, data loss."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from harness import running_broker
from helpers import add_partitions, create_topic, produce, raise_if_failed, read, rows_read

pytestmark = pytest.mark.spark


def stream(spark, bootstrap: str, topic: str, **options: str):
    reader = spark.readStream.format("dm").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def to_parquet(df, out: Path, checkpoint: Path, available_now: bool = True):
    writer = (df.selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value").writeStream
              .format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint)))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="200 milliseconds")
    return writer.start()


def written(spark, out: Path) -> list[tuple[int, int, str]]:
    return sorted((r.partition, r.offset, r.value) for r in spark.read.parquet(str(out)).collect())


def test_max_offsets_per_trigger_splits_available_data_into_micro_batches(spark, broker, topic_name, tmp_path):
    create_topic(broker.bootstrap, topic_name, 3)
    produce(broker.bootstrap, topic_name, [(i % 3, None, f"v{i}".encode()) for i in range(3000)])
    q = to_parquet(stream(spark, broker.bootstrap, topic_name, startingOffsets="earliest", maxOffsetsPerTrigger="700"),
                   tmp_path / "out", tmp_path / "ck")
    q.awaitTermination(120)
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert len(sizes) >= 5 and max(sizes) <= 700 and sum(sizes) == 3000, sizes
    got = written(spark, tmp_path / "out")
    assert len(got) == 3000 and len({(p, o) for p, o, _ in got}) == 3000


def test_starting_offsets_default_to_latest(spark, broker, topic_name, tmp_path):
    create_topic(broker.bootstrap, topic_name, 1)
    produce(broker.bootstrap, topic_name, [(0, None, b"before")])
    q = to_parquet(stream(spark, broker.bootstrap, topic_name), tmp_path / "out", tmp_path / "ck",
                   available_now=False)
    try:
        deadline = time.time() + 60
        while not q.recentProgress and q.isActive and time.time() < deadline:
            time.sleep(0.2)
        produce(broker.bootstrap, topic_name, [(0, None, b"after")])
        while q.isActive and time.time() < deadline and rows_read(q) < 1:
            time.sleep(0.2)
        raise_if_failed(q)
    finally:
        q.stop()
    assert [v for _, _, v in written(spark, tmp_path / "out")] == ["after"]


def test_restart_from_checkpoint_has_no_gap_and_no_duplicate(spark, broker, topic_name, tmp_path):
    """Stop a running query while records keep arriving, restart it from its checkpoint: the file
    sink holds every record exactly once."""
    create_topic(broker.bootstrap, topic_name, 2)
    produce(broker.bootstrap, topic_name, [(i % 2, None, f"first-{i}".encode()) for i in range(4000)])
    done = threading.Event()

    def keep_producing() -> None:
        for chunk in range(10):
            produce(broker.bootstrap, topic_name, [(i % 2, None, f"more-{chunk}-{i}".encode()) for i in range(300)])
        done.set()

    source = stream(spark, broker.bootstrap, topic_name, startingOffsets="earliest", maxOffsetsPerTrigger="500")
    q = to_parquet(source, tmp_path / "out", tmp_path / "ck", available_now=False)
    producer = threading.Thread(target=keep_producing)
    producer.start()
    deadline = time.time() + 90
    while len([p for p in q.recentProgress if p["numInputRows"]]) < 3 and q.isActive and time.time() < deadline:
        time.sleep(0.1)
    raise_if_failed(q)
    q.stop()  # mid-stream: more records are waiting and still arriving
    first_run = rows_read(q)
    assert 0 < first_run < 7000
    producer.join(60)
    assert done.is_set()
    source = stream(spark, broker.bootstrap, topic_name, startingOffsets="earliest", maxOffsetsPerTrigger="500")
    q2 = to_parquet(source, tmp_path / "out", tmp_path / "ck")
    q2.awaitTermination(180)
    got = written(spark, tmp_path / "out")
    assert len(got) == 7000, f"{len(got)} rows for 7000 records"
    assert sorted((p, o) for p, o, _ in got) == sorted((p, o) for p in range(2) for o in range(3500))
    everything = sorted((r.partition, r.offset, bytes(r.value).decode())
                        for r in read(spark, broker.bootstrap, topic_name).collect())
    assert got == everything


def test_new_partitions_are_picked_up_from_earliest(spark, broker, topic_name, tmp_path):
    create_topic(broker.bootstrap, topic_name, 1)
    produce(broker.bootstrap, topic_name, [(0, None, b"a0")])
    q = to_parquet(stream(spark, broker.bootstrap, topic_name, startingOffsets="earliest"),
                   tmp_path / "out", tmp_path / "ck")
    q.awaitTermination(60)
    add_partitions(broker.bootstrap, topic_name, 4)  # partition 3 stays empty
    produce(broker.bootstrap, topic_name, [(1, None, b"b0"), (2, None, b"c0"), (0, None, b"a1")])
    q = to_parquet(stream(spark, broker.bootstrap, topic_name, startingOffsets="earliest"),
                   tmp_path / "out", tmp_path / "ck")
    q.awaitTermination(60)
    raise_if_failed(q)
    assert written(spark, tmp_path / "out") == [(0, 0, "a0"), (0, 1, "a1"), (1, 0, "b0"), (2, 0, "c0")]
    add_partitions(broker.bootstrap, topic_name, 5)  # only an empty partition is new: nothing to read
    q = to_parquet(stream(spark, broker.bootstrap, topic_name, startingOffsets="earliest"),
                   tmp_path / "out", tmp_path / "ck")
    q.awaitTermination(60)
    raise_if_failed(q)
    assert len(written(spark, tmp_path / "out")) == 4


@pytest.fixture
def retention_broker(tmp_path):
    with running_broker(tmp_path / "retention", {"log.retention.check.interval.ms": 100}) as proc:
        yield proc


def test_offsets_deleted_by_retention_follow_fail_on_data_loss(spark, retention_broker, topic_name, tmp_path):
    bootstrap = retention_broker.bootstrap
    create_topic(bootstrap, topic_name, 1, {"segment.bytes": "1024"})
    produce(bootstrap, topic_name, [(0, None, b"x" * 200) for _ in range(50)])
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource("topic", topic_name, incremental_configs=[
        ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(15)
    # Retention runs every 100 ms and may take several passes: wait until the count settles.
    deadline = time.time() + 30
    counts = [50]
    while time.time() < deadline and (counts[-1] == 50 or len(counts) < 3 or len(set(counts[-3:])) > 1):
        time.sleep(0.5)
        counts.append(read(spark, bootstrap, topic_name).count())
    remaining = counts[-1]
    assert remaining < 50, "retention deleted nothing"
    from_zero = json.dumps({topic_name: {"0": 0}})
    with pytest.raises(Exception, match="deleted"):
        read(spark, bootstrap, topic_name, startingOffsets=from_zero).collect()
    assert read(spark, bootstrap, topic_name, startingOffsets=from_zero, failOnDataLoss="false").count() == remaining

    source = stream(spark, bootstrap, topic_name, startingOffsets=from_zero)
    q = to_parquet(source, tmp_path / "out", tmp_path / "ck")
    with pytest.raises(Exception, match="deleted"):
        q.awaitTermination(60)
    source = stream(spark, bootstrap, topic_name, startingOffsets=from_zero, failOnDataLoss="false")
    q = to_parquet(source, tmp_path / "out2", tmp_path / "ck2")
    q.awaitTermination(60)
    assert len(written(spark, tmp_path / "out2")) == remaining
