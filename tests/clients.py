"""The same operations through each real Kafka client (kafka-python, aiokafka, confluent-kafka)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Rec:
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: int | None = None
    partition: int | None = None


@dataclass(frozen=True)
class Got:
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


@dataclass
class Deliveries:
    """A confluent-kafka producer's delivery reports (`on_delivery=deliveries`): what was acknowledged, in
    the order the reports came, and the errors."""

    acked: list[tuple[int, bytes]] = field(default_factory=list)  # (offset, value)
    failed: list[str] = field(default_factory=list)

    def __call__(self, err, msg) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked.append((msg.offset(), msg.value()))

    @property
    def values(self) -> list[bytes]:
        return [value for _, value in self.acked]


@dataclass
class Acked:
    offsets: list[tuple[int, int]] = field(default_factory=list)  # (partition, offset) per record, -1 if unknown


class ConfluentClient:
    name = "confluent-kafka"

    def __init__(self, bootstrap: str, config: dict[str, str] | None = None) -> None:
        self.bootstrap = bootstrap
        self.config = dict(config or {})  # e.g. security settings, added to every client made here

    def create_topic(self, topic: str, partitions: int, configs: dict[str, str] | None = None,
                     replication_factor: int = 1) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap, **self.config})
        admin.create_topics([NewTopic(topic, partitions, replication_factor, config=configs or {})])[topic].result(15)

    def produce(self, topic: str, records: list[Rec], acks: str = "all", compression: str = "none",
                idempotent: bool = True, max_bytes: int = 1_000_000) -> Acked:
        from confluent_kafka import Producer

        producer = Producer({
            **self.config, "bootstrap.servers": self.bootstrap, "acks": acks, "compression.type": compression,
            "enable.idempotence": idempotent and acks == "all", "linger.ms": 5,
            "message.max.bytes": max(max_bytes, 1_000_000),
        })
        results: list[tuple[int, int] | None] = [None] * len(records)
        errors: list[str] = []
        for i, r in enumerate(records):
            def report(err, msg, i=i):
                if err is not None:
                    errors.append(str(err))
                else:
                    results[i] = (msg.partition(), msg.offset())
            kwargs = {"key": r.key, "headers": list(r.headers), "on_delivery": report}
            if r.timestamp is not None:
                kwargs["timestamp"] = r.timestamp
            if r.partition is not None:
                kwargs["partition"] = r.partition
            producer.produce(topic, r.value, **kwargs)
            producer.poll(0)
        assert producer.flush(30) == 0
        assert not errors, errors
        return Acked([res if res is not None else (-1, -1) for res in results])

    def consume(self, topic: str, count: int, timeout: float = 30, to_end: bool = False) -> list[Got]:
        """Up to `count` records from the beginning, or (to_end) every record up to each partition's end."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

        consumer = Consumer({**self.config, "bootstrap.servers": self.bootstrap, "group.id": "unused",
                             "enable.auto.commit": False, "fetch.message.max.bytes": 4 << 20,
                             "enable.partition.eof": to_end})
        md = consumer.list_topics(topic, timeout=10).topics[topic]
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in md.partitions])
        out: list[Got] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        try:
            while (len(out) < count and time.monotonic() < deadline
                   and not (to_end and len(at_end) == len(md.partitions))):
                for msg in consumer.consume(1000, 0.5):
                    if to_end and msg.error() is not None and msg.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                        continue
                    assert msg.error() is None, msg.error()
                    out.append(Got(msg.partition(), msg.offset(), msg.key(), msg.value(),
                                   tuple(msg.headers() or ()), msg.timestamp()[1]))
        finally:
            consumer.close()
        assert not to_end or len(at_end) == len(md.partitions), f"{topic} not read to its end in {timeout} s"
        return out


class KafkaPythonClient:
    name = "kafka-python"

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def create_topic(self, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
        try:
            admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs or {})])
        finally:
            admin.close()

    def produce(self, topic: str, records: list[Rec], acks: str = "all", compression: str = "none",
                idempotent: bool = True, max_bytes: int = 1_000_000) -> Acked:
        from kafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=self.bootstrap, acks={"all": "all", "1": 1, "0": 0}[acks],
            compression_type=None if compression == "none" else compression,
            enable_idempotence=idempotent and acks == "all", linger_ms=5,
            max_request_size=max(max_bytes + 10_000, 1_048_576),
        )
        futures = [
            producer.send(topic, value=r.value, key=r.key, headers=list(r.headers), timestamp_ms=r.timestamp,
                          partition=r.partition)
            for r in records
        ]
        producer.flush(30)
        acked = Acked()
        for fut in futures:
            md = fut.get(30)
            acked.offsets.append((md.partition, md.offset) if md.offset >= 0 else (-1, -1))
        producer.close(10)
        return acked

    def consume(self, topic: str, count: int, timeout: float = 30) -> list[Got]:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False, group_id=None,
                                 max_partition_fetch_bytes=4 << 20, fetch_max_bytes=8 << 20)
        partitions = consumer.partitions_for_topic(topic)
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        out: list[Got] = []
        deadline = time.monotonic() + timeout
        try:
            while len(out) < count and time.monotonic() < deadline:
                for tp, msgs in consumer.poll(500).items():
                    for m in msgs:
                        out.append(Got(tp.partition, m.offset, m.key, m.value, tuple(m.headers), m.timestamp))
        finally:
            consumer.close()
        return out


class AioKafkaClient:
    name = "aiokafka"

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def create_topic(self, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        async def go() -> None:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
            await admin.start()
            try:
                await admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs or {})])
            finally:
                await admin.close()

        asyncio.run(go())

    def produce(self, topic: str, records: list[Rec], acks: str = "all", compression: str = "none",
                idempotent: bool = True, max_bytes: int = 1_000_000) -> Acked:
        from aiokafka import AIOKafkaProducer

        async def go() -> Acked:
            producer = AIOKafkaProducer(
                bootstrap_servers=self.bootstrap, acks={"all": "all", "1": 1, "0": 0}[acks],
                compression_type=None if compression == "none" else compression,
                enable_idempotence=idempotent and acks == "all", linger_ms=5,
                max_request_size=max(max_bytes + 10_000, 1_048_576),
            )
            await producer.start()
            try:
                futures = [
                    await producer.send(topic, value=r.value, key=r.key, headers=list(r.headers),
                                        timestamp_ms=r.timestamp, partition=r.partition)
                    for r in records
                ]
                acked = Acked()
                for fut in futures:
                    md = await fut
                    acked.offsets.append((md.partition, md.offset) if md is not None else (-1, -1))
                return acked
            finally:
                await producer.stop()

        return asyncio.run(go())

    def consume(self, topic: str, count: int, timeout: float = 30) -> list[Got]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def go() -> list[Got]:
            consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                        max_partition_fetch_bytes=4 << 20, fetch_max_bytes=8 << 20)
            await consumer.start()
            out: list[Got] = []
            try:
                partitions = consumer.partitions_for_topic(topic) or set()
                if not partitions:
                    await consumer._client.force_metadata_update()
                    partitions = consumer.partitions_for_topic(topic) or set()
                tps = [TopicPartition(topic, p) for p in sorted(partitions)]
                consumer.assign(tps)
                await consumer.seek_to_beginning(*tps)
                deadline = time.monotonic() + timeout
                while len(out) < count and time.monotonic() < deadline:
                    batch = await consumer.getmany(timeout_ms=500)
                    for tp, msgs in batch.items():
                        for m in msgs:
                            out.append(Got(tp.partition, m.offset, m.key, m.value, tuple(m.headers or ()),
                                           m.timestamp))
            finally:
                await consumer.stop()
            return out

        return asyncio.run(go())


CLIENTS = [ConfluentClient, KafkaPythonClient, AioKafkaClient]


def no_open_transactions(bootstrap: str, topic: str, partitions: int) -> bool:
    """Every partition's last stable offset has reached its high watermark: no transaction hangs there (a
    read_committed offset query answers the last stable offset, a read_uncommitted one the high watermark)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    # What a partition answers while its leadership moves: librdkafka's offset query leaves the retry to its
    # caller, so the next call asks again. A new leader answers OFFSET_NOT_AVAILABLE until its high watermark
    # has reached the start of its epoch (as Kafka's does): its followers' next fetches move it.
    moving_leader = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TRANSPORT,
                     KafkaError._TIMED_OUT, KafkaError.OFFSET_NOT_AVAILABLE}
    committed = Consumer({"bootstrap.servers": bootstrap, "group.id": "lso", "isolation.level": "read_committed"})
    uncommitted = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw", "isolation.level": "read_uncommitted"})
    try:
        return all(committed.get_watermark_offsets(TopicPartition(topic, p), 10)[1] ==
                   uncommitted.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in range(partitions))
    except KafkaException as exc:
        if exc.args[0].code() in moving_leader:
            return False
        raise
    finally:
        committed.close()
        uncommitted.close()


def committed_after_failures(consumer, partitions: list, timeout: float = 60.0) -> list:
    """A confluent-kafka consumer's committed offsets of `partitions`, asked again until `timeout` when the
    group's coordinator is moving. librdkafka's committed() hands back NOT_COORDINATOR and
    COORDINATOR_LOAD_IN_PROGRESS instead of asking again (it marks neither retriable) when a broker is lost
    or a preferred election moves the coordinator during the call; a Java consumer retries both."""
    from confluent_kafka import KafkaError, KafkaException

    moving_coordinator = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                          KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._TIMED_OUT, KafkaError._TRANSPORT}
    deadline = time.monotonic() + timeout
    while True:
        try:
            return consumer.committed(partitions, min(30.0, max(1.0, deadline - time.monotonic())))
        except KafkaException as exc:
            error = exc.args[0]
            if not (error.retriable() or error.code() in moving_coordinator) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
