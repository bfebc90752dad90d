"""A streaming query keeps reading through partition leader SIGKILLs on a 3-broker cluster and
its file sink ends up with every acknowledged record exactly once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from chaos_tools import FAST_FAILURE, create_topic, fully_replicated, sequence_load
from group_clients import wait_for
from harness import Cluster
from helpers import raise_if_failed, rows_read
from measurements import note

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


def start_query(spark, bootstrap: str, out: Path, checkpoint: Path, available_now: bool):
    source = (spark.readStream.format("dm").option("kafka.bootstrap.servers", bootstrap).option("subscribe", "ha")
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "3000").load())
    writer = (source.selectExpr("partition", "offset", "value").writeStream.format("parquet")
              .option("path", str(out)).option("checkpointLocation", str(checkpoint)))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="300 milliseconds")
    return writer.start()


def test_streaming_read_through_leader_kills(spark, tmp_path: Path) -> None:
    with Cluster(tmp_path, 3, FAST_FAILURE) as cluster:
        create_topic(cluster, "ha", 2)
        out, checkpoint = tmp_path / "out", tmp_path / "ck"
        with sequence_load(cluster.bootstrap, "ha", 2) as producer:
            query = start_query(spark, cluster.bootstrap, out, checkpoint, available_now=False)
            wait_for(lambda: rows_read(query) > 500, timeout=60, what="the query reading")
            for partition in (0, 1):
                victim = cluster.leader("ha", partition)
                killed_at = time.monotonic()
                cluster.brokers[victim].kill()
                producer.first_ack_after(partition, killed_at)
                time.sleep(1)  # the query plans and reads across the change of leader
                cluster.brokers[victim].start()
                wait_for(lambda: fully_replicated(cluster, "ha", 2), timeout=60, what="the ISR back to 3")
            raise_if_failed(query)
            query.stop()
        assert producer.remaining == 0 and not producer.errors, producer.errors[:3]
        drain = start_query(spark, cluster.bootstrap, out, checkpoint, available_now=True)
        drain.awaitTermination(180)
        raise_if_failed(drain)
        got = [(r.partition, r.offset, bytes(r.value)) for r in spark.read.parquet(str(out)).collect()]
    acked = {(p, o, v) for p, o, v, _ in producer.acked}
    assert len(got) == len(set(got)), "a record was written twice"
    assert acked <= set(got), f"{len(acked - set(got))} acknowledged records missing"
    note(f"[spark failover] {len(acked)} acknowledged, {len(got)} read, 2 leader kills")
