"""deliveryGuarantee=exactly-once: the sink's transactions, read back read_committed with librdkafka
and with the dm source (kafka.isolation.level), through the driver's crash points."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from clients import ConfluentClient, no_open_transactions
from group_clients import wait_for
from harness import running_broker
from helpers import create_topic, produce, raise_if_failed, read, rows
from measurements import note

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory):
    # timed-out transactions are aborted within 200 ms instead of 10 s
    with running_broker(tmp_path_factory.mktemp("eos") / "data",
                        {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 200}) as proc:
        yield proc


def eos_options(bootstrap: str, prefix: str, **extra: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, "deliveryGuarantee": "exactly-once",
            "transactionalIdPrefix": prefix, **extra}


def committed_values(bootstrap: str, topic: str, count: int, timeout: float = 15) -> list[bytes]:
    """Every record a read_committed consumer (librdkafka's default) sees, waiting for `count`."""
    return sorted(g.value for g in ConfluentClient(bootstrap).consume(topic, count, timeout=timeout))


def all_values(bootstrap: str, topic: str) -> list[bytes]:
    """Every data record in the log, aborted ones included (read_uncommitted)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "raw", "isolation.level": "read_uncommitted",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    out, ended = [], set()
    deadline = time.monotonic() + 15
    while len(ended) < len(parts) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            ended.add(msg.partition())
            continue
        out.append(msg.value())
    consumer.close()
    return sorted(out)


def committer(bootstrap: str, prefix: str, **extra: str):
    from pyspark_dm.exactly_once import Committer
    from pyspark_dm.options import write_options

    return Committer(write_options(eos_options(bootstrap, prefix, topic="unused", **extra)))


def open_task(bootstrap: str, prefix: str, partition: int, topic: str, values: list[bytes], **extra: str):
    """What a task does: its rows in a transaction it leaves open. Returns the handle."""
    from pyspark_dm.exactly_once import open_transaction
    from pyspark_dm.options import write_options

    producer, handle = open_transaction(write_options(eos_options(bootstrap, prefix, topic=topic, **extra)), partition)
    for v in values:
        producer.produce(topic, v, partition=partition % 2)
    assert producer.flush(15) == 0
    return handle


def test_batch_write_commits_every_task_together(spark, txn_broker, topic_name) -> None:
    b = txn_broker
    create_topic(b.bootstrap, topic_name, 3)
    df = spark.range(0, 1000, numPartitions=4).selectExpr("CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value")
    writer = df.write.format("dm").option("topic", topic_name).mode("append")
    for k, v in eos_options(b.bootstrap, "batch-" + topic_name).items():
        writer = writer.option(k, v)
    writer.save()
    expected = sorted(str(i).encode() for i in range(1000))
    assert committed_values(b.bootstrap, topic_name, 1000) == expected
    # read by the dm source both ways: nothing was aborted, and markers are not rows
    committed = rows(read(spark, b.bootstrap, topic_name, **{"kafka.isolation.level": "read_committed"}))
    assert sorted(v for _, _, _, v in committed) == expected
    assert len(rows(read(spark, b.bootstrap, topic_name))) == 1000
    assert committer(b.bootstrap, "batch-" + topic_name).log.latest("batch-" + topic_name).state == "done"


def test_streaming_copy_is_exactly_once_and_read_committed_reads_it(spark, txn_broker, topic_name, tmp_path) -> None:
    b = txn_broker
    target = topic_name + "-copy"
    create_topic(b.bootstrap, topic_name, 2)
    create_topic(b.bootstrap, target, 2)
    produce(b.bootstrap, topic_name, [(i % 2, None, f"v{i}".encode()) for i in range(600)])

    def run() -> None:
        source = (spark.readStream.format("dm").option("kafka.bootstrap.servers", b.bootstrap)
                  .option("subscribe", topic_name).option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", "250").load())
        writer = source.select("value").writeStream.format("dm").option("topic", target)
        for k, v in eos_options(b.bootstrap, "copy-" + topic_name).items():
            writer = writer.option(k, v)
        q = writer.option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start()
        q.awaitTermination(120)
        raise_if_failed(q)

    run()
    produce(b.bootstrap, topic_name, [(i % 2, None, f"v{i}".encode()) for i in range(600, 900)])
    run()  # restarted from its checkpoint: only the new records
    decision = committer(b.bootstrap, "copy-" + topic_name).log.latest("copy-" + topic_name)
    assert decision.state == "done" and len(decision.query) == 36  # the streaming query's id, as Spark gives it
    expected = sorted(f"v{i}".encode() for i in range(900))
    assert committed_values(b.bootstrap, target, 900) == expected
    streamed = (spark.readStream.format("dm").option("kafka.bootstrap.servers", b.bootstrap)
                .option("subscribe", target).option("startingOffsets", "earliest")
                .option("kafka.isolation.level", "read_committed").load())
    q = (streamed.selectExpr("CAST(value AS STRING) AS value").writeStream.format("parquet")
         .option("path", str(tmp_path / "out")).option("checkpointLocation", str(tmp_path / "ck2"))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert sorted(r.value.encode() for r in spark.read.parquet(str(tmp_path / "out")).collect()) == expected


def test_source_reads_committed_records_only(spark, txn_broker, topic_name) -> None:
    """kafka.isolation.level=read_committed: aborted transactions are skipped and an open one ends
    the read at the last stable offset; read_uncommitted (the default, as Spark's) sees everything."""
    from confluent_kafka import Producer

    b = txn_broker
    create_topic(b.bootstrap, topic_name, 1)

    def transaction(tid: str, values: list[bytes], end: str):
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid})
        p.init_transactions(15)
        p.begin_transaction()
        for v in values:
            p.produce(topic_name, v, partition=0)
        p.flush(15)
        if end == "commit":
            p.commit_transaction(15)
        elif end == "abort":
            p.abort_transaction(15)
        return p

    transaction("t-a", [b"c1", b"c2"], "commit")
    transaction("t-b", [b"a1", b"a2", b"a3"], "abort")
    transaction("t-a", [b"c3"], "commit")
    hanging = transaction("t-c", [b"open1"], "open")
    transaction("t-a", [b"after-open"], "commit")
    committed = [bytes(r.value) for r in read(spark, b.bootstrap, topic_name,
                                              **{"kafka.isolation.level": "read_committed"}).collect()]
    assert committed == [b"c1", b"c2", b"c3"]  # stops at the open transaction
    everything = [bytes(r.value) for r in read(spark, b.bootstrap, topic_name).collect()]
    assert everything == [b"c1", b"c2", b"a1", b"a2", b"a3", b"c3", b"open1", b"after-open"]
    hanging.abort_transaction(15)
    committed = [bytes(r.value) for r in read(spark, b.bootstrap, topic_name,
                                              **{"kafka.isolation.level": "read_committed"}).collect()]
    assert committed == [b"c1", b"c2", b"c3", b"after-open"]
    with pytest.raises(Exception, match="read_uncommitted or read_committed"):
        read(spark, b.bootstrap, topic_name, **{"kafka.isolation.level": "serializable"}).collect()


def test_a_decided_batch_is_finished_by_the_next_driver_and_its_replay_not_written(txn_broker, topic_name) -> None:
    """The driver dies after recording its decision, before ending the transactions: the next one
    commits them, and Spark's replay of the batch (same transactional ids) writes nothing more."""
    from pyspark_dm.commit_log import Decision

    b = txn_broker
    create_topic(b.bootstrap, topic_name, 2)
    prefix = "crash-" + topic_name
    first = [open_task(b.bootstrap, prefix, p, topic_name, [b"r%d-%d" % (p, i) for i in range(50)]) for p in (0, 1)]
    c = committer(b.bootstrap, prefix)
    c.log.ensure_topic()
    c.log.append(Decision(prefix=prefix, query="q1", batch=7, state="decided",
                          transactions=[(h.transactional_id, h.producer_id, h.epoch) for h in first]))
    assert committed_values(b.bootstrap, topic_name, 1, timeout=2) == []  # nothing visible yet
    committer(b.bootstrap, prefix).recover()  # the restarted driver, before any task runs
    expected = sorted(b"r%d-%d" % (p, i) for p in (0, 1) for i in range(50))
    assert committed_values(b.bootstrap, topic_name, 100) == expected
    replay = [open_task(b.bootstrap, prefix, p, topic_name, [b"r%d-%d" % (p, i) for i in range(50)]) for p in (0, 1)]
    committer(b.bootstrap, prefix).commit("q1", 7, replay)
    assert committed_values(b.bootstrap, topic_name, 101, timeout=3) == expected
    assert len(all_values(b.bootstrap, topic_name)) == 200  # the replay's records are in the log, aborted
    # the next batch goes through normally
    nxt = [open_task(b.bootstrap, prefix, 0, topic_name, [b"next"])]
    committer(b.bootstrap, prefix).commit("q1", 8, nxt)
    assert committed_values(b.bootstrap, topic_name, 101) == sorted([*expected, b"next"])


def test_transactions_aborted_at_their_timeout_fail_the_commit_clearly(txn_broker, topic_name) -> None:
    from pyspark_dm.errors import DmSourceError

    b = txn_broker
    create_topic(b.bootstrap, topic_name, 2)
    prefix = "slow-" + topic_name
    handles = [open_task(b.bootstrap, prefix, p, topic_name, [b"x"], **{"kafka.transaction.timeout.ms": "1000"})
               for p in (0, 1)]
    wait_for(lambda: no_open_transactions(b.bootstrap, topic_name, 2), 60, what="the coordinator aborting both")
    c = committer(b.bootstrap, prefix)
    c.log.ensure_topic()
    with pytest.raises(DmSourceError, match="aborted its transactions before they were committed"):
        c.commit("q", 0, handles)
    assert c.log.latest(prefix).state == "abandoned"  # a replay writes the batch again
    assert committed_values(b.bootstrap, topic_name, 1, timeout=2) == []


def test_stray_transactions_of_the_prefix_are_aborted_after_a_commit(txn_broker, topic_name) -> None:
    """A task attempt of a run that died left its transaction open: it holds read_committed readers
    back until the next commit of the prefix aborts it."""
    b = txn_broker
    create_topic(b.bootstrap, topic_name, 2)
    prefix = "stray-" + topic_name
    open_task(b.bootstrap, prefix, 5, topic_name, [b"zombie"])  # partition 5 % 2 = 1 of the topic
    c = committer(b.bootstrap, prefix)
    c.log.ensure_topic()
    from pyspark_dm.txn_client import TxnClient
    from pyspark_dm.wire import DmClient

    with DmClient(b.bootstrap) as client:
        assert TxnClient(client).open_transactions(prefix + "-") == [prefix + "-5"]
    handle = open_task(b.bootstrap, prefix, 1, topic_name, [b"real"])
    c.commit("q", 0, [handle])
    with DmClient(b.bootstrap) as client:
        assert TxnClient(client).open_transactions(prefix + "-") == []
    assert committed_values(b.bootstrap, topic_name, 1) == [b"real"]  # the zombie's record no longer holds it


def test_exactly_once_options_are_checked(spark, txn_broker, topic_name) -> None:
    df = spark.range(1).selectExpr("CAST(id AS STRING) AS value")

    def save(**options: str) -> None:
        w = df.write.format("dm").option("kafka.bootstrap.servers", txn_broker.bootstrap).option("topic", topic_name)
        for k, v in options.items():
            w = w.option(k, v)
        w.mode("append").save()

    with pytest.raises(Exception, match="needs the option transactionalIdPrefix"):
        save(deliveryGuarantee="exactly-once")
    with pytest.raises(Exception, match="at-least-once or exactly-once"):
        save(deliveryGuarantee="twice")
    with pytest.raises(Exception, match="names its transactions itself"):
        save(deliveryGuarantee="exactly-once", transactionalIdPrefix="p", **{"kafka.transactional.id": "x"})
    with pytest.raises(Exception, match="is for deliveryGuarantee=exactly-once"):
        save(transactionalIdPrefix="p")


# three Spark drivers one after another (each a JVM start): 170 s on an idle 2-core VM, 506 s beside four
# busy loops, and beside the e2e suite a first batch took 4.5 min; a driver fails when it commits no batch
# for STALLED_S, and the limit for the whole test is well above three slow first batches
@pytest.mark.timeout(1800)
def test_driver_killed_mid_stream_loses_and_duplicates_nothing(txn_broker, topic_name, tmp_path: Path) -> None:
    """The whole driver (Python, its JVM and workers) SIGKILLed twice while it copies a topic;
    after a final run from the checkpoint, read_committed sees every source record exactly once."""
    from spark_driver import kill_when, run_copy, wait_for_exit

    b = txn_broker
    target = topic_name + "-copy"
    create_topic(b.bootstrap, topic_name, 2)
    create_topic(b.bootstrap, target, 2)
    total = 4000
    produce(b.bootstrap, topic_name, [(i % 2, None, b"v%05d" % i) for i in range(total)])
    prefix = "chaos-" + topic_name
    for seen in (500, 1800):
        kill_when(run_copy(b.bootstrap, topic_name, target, prefix, tmp_path / "ck", available_now=False),
                  lambda seen=seen: len(ConfluentClient(b.bootstrap).consume(target, seen, timeout=2)) >= seen)
    final = run_copy(b.bootstrap, topic_name, target, prefix, tmp_path / "ck", available_now=True)
    assert wait_for_exit(final) == 0, final.tail()
    got = committed_values(b.bootstrap, target, total + 1, timeout=10)
    assert len(got) == len(set(got)), f"{len(got) - len(set(got))} records written twice"
    assert got == sorted(b"v%05d" % i for i in range(total))
    note(f"[spark exactly-once] {total} records copied through 2 driver kills; "
          f"{len(all_values(b.bootstrap, target)) - total} aborted duplicates in the log, none visible")
