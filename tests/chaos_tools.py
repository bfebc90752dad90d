"""Shared pieces of the chaos tests: a sequence producer that records what was acknowledged, the
invariant check, and a direct comparison of the replicas' logs on disk."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from pathlib import Path

from clients import ConfluentClient
from dm_broker.log.records import iter_batches
from harness import Cluster

# Failure detection in about two seconds instead of Kafka's defaults, for every chaos cluster.
FAST_FAILURE = {"broker.session.timeout.ms": 2000, "broker.heartbeat.interval.ms": 200,
                "replica.lag.time.max.ms": 3000, "group.initial.rebalance.delay.ms": 0}
TOPIC_CONFIG = {"min.insync.replicas": "2"}


def create_topic(cluster: Cluster, topic: str, partitions: int) -> None:
    """An RF=3 topic with min.insync.replicas=2."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 3, config=TOPIC_CONFIG)])[topic].result(15)


def fully_replicated(cluster: Cluster, topic: str, partitions: int) -> bool:
    md = cluster.metadata()["topics"][topic]["partitions"]
    return all(len(md[p]["isr"]) == 3 and md[p]["leader"] >= 0 for p in range(partitions))


class AckTimes:
    """A producer's acknowledgements (partition, offset, value, ack time) and when each value was produced."""

    acked: list[tuple[int, int, bytes, float]]
    produced_at: dict[bytes, float]

    def first_ack_after(self, partition: int, moment: float, timeout: float = 60) -> float:
        """Seconds from `moment` (a failure) to the acknowledgement of the first record on
        `partition` that was produced after it — the time to the next successful produce. (A
        delivery report seen just after the failure may belong to an answer sent before it.)"""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            after = [at for p, _, v, at in self.acked[-20000:]
                     if p == partition and self.produced_at.get(v, 0) > moment]
            if after:
                return min(after) - moment
            time.sleep(0.05)
        raise AssertionError(f"no record produced after the failure was acknowledged on partition {partition}")


def kill_leaders_in_turn(cluster: Cluster, topic: str, partitions: int, rounds: int, load: AckTimes) -> list[float]:
    """SIGKILLs the leader of partition 0, 1, … in turn, `rounds` times, restarting it and waiting for every
    ISR to be whole again each time; the seconds from each kill to `load`'s next acknowledgement there."""
    from group_clients import wait_for

    failovers = []
    for round_ in range(rounds):
        partition = round_ % partitions
        victim = cluster.leader(topic, partition)
        killed_at = time.monotonic()
        cluster.brokers[victim].kill()
        failovers.append(load.first_ack_after(partition, killed_at))
        cluster.brokers[victim].start()
        wait_for(lambda: fully_replicated(cluster, topic, partitions), timeout=60, what="every ISR whole again")
    return failovers


class SequenceProducer(threading.Thread, AckTimes):
    """Idempotent acks=all producer of "p<partition>-<seq>" values; records every ack with its time."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate_pause: float = 0.0005,
                 config: dict[str, str] | None = None, padding: int = 0) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.producer = Producer({
            **(config or {}),
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 2,
            "message.timeout.ms": 120_000, "retry.backoff.ms": 50, "reconnect.backoff.max.ms": 200,
            "topic.metadata.refresh.interval.ms": 1000,
            # After a silent partition (no RST) an idempotent producer must wait for its in-flight
            # requests to the unreachable leader to time out (socket.timeout.ms, 60 s by default)
            # before later records of the partition may go to the new leader.
            "request.timeout.ms": 5000, "socket.timeout.ms": 5000,
        })
        self.topic = topic
        self.partitions = partitions
        self.acked: list[tuple[int, int, bytes, float]] = []  # (partition, offset, value, ack time)
        self.produced_at: dict[bytes, float] = {}
        self.errors: list[str] = []
        self.remaining = -1
        self.pause = rate_pause
        self.padding = b"-" + b"x" * padding if padding else b""  # after the sequence number, which verify reads
        self.stop = threading.Event()

    def run(self) -> None:
        seq = 0
        while not self.stop.is_set():
            partition = seq % self.partitions
            value = b"p%d-%08d" % (partition, seq) + self.padding

            def report(err, msg, value=value):
                if err is not None:
                    self.errors.append(str(err))
                else:
                    self.acked.append((msg.partition(), msg.offset(), value, time.monotonic()))

            try:
                self.producer.produce(self.topic, value, partition=partition, on_delivery=report)
                self.produced_at[value] = time.monotonic()
                seq += 1
            except BufferError:
                pass
            self.producer.poll(self.pause if seq % 50 else 0.005)
        self.remaining = self.producer.flush(120)


@contextlib.contextmanager
def sequence_load(bootstrap: str, topic: str, partitions: int, warmup: int = 300):
    """Runs a SequenceProducer for the body of the block (after `warmup` acks); stops and drains it."""
    from group_clients import wait_for

    producer = SequenceProducer(bootstrap, topic, partitions)
    producer.start()
    try:
        wait_for(lambda: len(producer.acked) > warmup, what="first acknowledgements")
        yield producer
    finally:
        producer.stop.set()
        producer.join(150)


def assert_nothing_lost(result: dict[str, int], producer: SequenceProducer) -> None:
    assert producer.remaining == 0 and not producer.errors, producer.errors[:5]
    assert result["acked"] > 0
    assert result == {**result, "lost": 0, "duplicated": 0, "reordered": 0, "misplaced": 0}


def verify(bootstrap: str, topic: str, producer: SequenceProducer, partitions: int,
           other_records: int = 0, config: dict[str, str] | None = None) -> dict[str, int]:
    """Reads everything back and counts acknowledged records lost, duplicates, reorderings
    (`other_records`: how many records not of the sequence producer the topic holds)."""
    total_acked = len(producer.acked)
    got = ConfluentClient(bootstrap, config).consume(topic, total_acked + other_records, timeout=90)
    got = [g for g in got if g.value[:1] == b"p" and b"-" in g.value]
    values = [g.value for g in got]
    acked_values = {v for _, _, v, _ in producer.acked}
    lost = acked_values - set(values)
    duplicated = len(values) - len(set(values))
    reordered = 0
    for p in range(partitions):
        seqs = [int(g.value.split(b"-")[1]) for g in sorted(got, key=lambda g: g.offset) if g.partition == p]
        reordered += sum(1 for a, b in itertools.pairwise(seqs) if b <= a)
    by_value = {g.value: (g.partition, g.offset) for g in got}
    # An offset of None is librdkafka's implicit ack (a later request of the partition succeeded
    # after one with an uncertain outcome): such a record is checked by value only (`lost`).
    misplaced = sum(1 for p, o, v, _ in producer.acked if o is not None and by_value.get(v) != (p, o))
    return {"acked": total_acked, "lost": len(lost), "duplicated": duplicated, "reordered": reordered,
            "misplaced": misplaced}


def replica_batches(data_dir: Path, topic: str, partition: int) -> list[tuple[int, int, int]]:
    """(base offset, last offset, CRC) of every batch of one replica, read from its files."""
    out = []
    for segment in sorted((data_dir / f"{topic}-{partition}").glob("*.log")):
        data = segment.read_bytes()
        out += [(h.base_offset, h.last_offset, h.crc) for _, h in iter_batches(data)]
    return out


def wait_replicas_identical(dirs: list[Path], topic: str, partition: int, timeout: float = 30) -> int:
    """Waits until every replica holds exactly the same batches; returns how many."""
    deadline = time.monotonic() + timeout
    while True:
        logs = [replica_batches(d, topic, partition) for d in dirs]
        if all(log == logs[0] for log in logs):
            return len(logs[0])
        if time.monotonic() > deadline:
            lengths = [len(x) for x in logs]
            first_diff = next((i for i, rows in enumerate(zip(*logs, strict=False)) if len(set(rows)) > 1), None)
            raise AssertionError(f"replicas of {topic}-{partition} differ: {lengths} batches, first difference at "
                                 f"batch {first_diff}")
        time.sleep(0.3)
