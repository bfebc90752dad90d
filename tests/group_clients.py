"""Group consumers of each real client, run in threads: subscribe, process, commit after
processing, record what they saw and what they own."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Seen:
    consumer: str
    partition: int
    offset: int
    value: bytes


class GroupConsumer(threading.Thread):
    client = "?"

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, sink: list[Seen],
                 session_ms: int = 6000, assignor: str | None = None, instance_id: str | None = None) -> None:
        super().__init__(daemon=True, name=name)
        self.bootstrap = bootstrap
        self.group = group
        self.topic = topic
        self.sink = sink
        self.session_ms = session_ms
        self.assignor = assignor
        self.instance_id = instance_id
        self.stop_event = threading.Event()
        self.assigned: set[int] = set()
        self.error: BaseException | None = None
        self.lock = threading.Lock()

    def record(self, partition: int, offset: int, value: bytes) -> None:
        with self.lock:
            self.sink.append(Seen(self.name, partition, offset, value))

    def record_polled(self, batch: dict) -> int:
        """Records a kafka-python / aiokafka poll result ({TopicPartition: [records]}); returns the count."""
        count = 0
        for tp, msgs in batch.items():
            for m in msgs:
                self.record(tp.partition, m.offset, m.value)
                count += 1
        return count

    def python_client_options(self, assignors: dict[str, tuple]) -> dict:
        """The consumer settings in the keyword form kafka-python and aiokafka share."""
        options = {"bootstrap_servers": self.bootstrap, "group_id": self.group, "auto_offset_reset": "earliest",
                   "enable_auto_commit": False, "session_timeout_ms": self.session_ms,
                   "heartbeat_interval_ms": max(300, self.session_ms // 6), "client_id": self.name}
        if self.assignor:
            options["partition_assignment_strategy"] = assignors[self.assignor]
        if self.instance_id:
            options["group_instance_id"] = self.instance_id
        return options

    def stop(self, timeout: float = 30) -> None:
        self.stop_event.set()
        self.join(timeout)

    def run(self) -> None:
        try:
            self.consume()
        except BaseException as exc:  # surfaced by the test
            self.error = exc


class ConfluentGroupConsumer(GroupConsumer):
    client = "confluent-kafka"

    def config(self) -> dict:
        conf = {"bootstrap.servers": self.bootstrap, "group.id": self.group, "auto.offset.reset": "earliest",
                "enable.auto.commit": False, "session.timeout.ms": self.session_ms,
                "heartbeat.interval.ms": max(300, self.session_ms // 6), "client.id": self.name}
        if self.assignor:
            conf["partition.assignment.strategy"] = self.assignor
        if self.instance_id:
            conf["group.instance.id"] = self.instance_id
        return conf

    def consume(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer(self.config())
        consumer.subscribe([self.topic])
        try:
            while not self.stop_event.is_set():
                msgs = consumer.consume(500, 0.2)
                self.assigned = {tp.partition for tp in consumer.assignment()}
                good = [m for m in msgs if m.error() is None]
                for m in good:
                    self.record(m.partition(), m.offset(), m.value())
                if good:
                    consumer.commit(asynchronous=False)
        finally:
            consumer.close()


class ConfluentKip848Consumer(ConfluentGroupConsumer):
    """confluent-kafka with group.protocol=consumer: the broker assigns (KIP-848); the session and the
    heartbeat interval are the broker's, `assignor` is group.remote.assignor, a topic starting with ^
    is a regex subscription."""

    client = "confluent-kafka (KIP-848)"

    def config(self) -> dict:
        conf = {"bootstrap.servers": self.bootstrap, "group.id": self.group, "group.protocol": "consumer",
                "auto.offset.reset": "earliest", "enable.auto.commit": False, "client.id": self.name}
        if self.assignor:
            conf["group.remote.assignor"] = self.assignor
        if self.instance_id:
            conf["group.instance.id"] = self.instance_id
        return conf


class KafkaPythonGroupConsumer(GroupConsumer):
    client = "kafka-python"

    def consume(self) -> None:
        from kafka import KafkaConsumer
        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        consumer = KafkaConsumer(**self.python_client_options(
            {"range": (RangePartitionAssignor,), "roundrobin": (RoundRobinPartitionAssignor,)}))
        consumer.subscribe([self.topic])
        try:
            while not self.stop_event.is_set():
                batch = consumer.poll(timeout_ms=200)
                self.assigned = {tp.partition for tp in consumer.assignment()}
                if self.record_polled(batch):
                    consumer.commit()
        finally:
            consumer.close()


class AioKafkaGroupConsumer(GroupConsumer):
    client = "aiokafka"

    def consume(self) -> None:
        asyncio.run(self._consume())

    async def _consume(self) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.coordinator.assignors.range import RangePartitionAssignor
        from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        consumer = AIOKafkaConsumer(self.topic, **self.python_client_options(
            {"range": (RangePartitionAssignor,), "roundrobin": (RoundRobinPartitionAssignor,)}))
        await consumer.start()
        try:
            while not self.stop_event.is_set():
                batch = await consumer.getmany(timeout_ms=200)
                self.assigned = {tp.partition for tp in consumer.assignment()}
                if self.record_polled(batch):
                    await consumer.commit()
        finally:
            await consumer.stop()


GROUP_CONSUMERS = [ConfluentGroupConsumer, KafkaPythonGroupConsumer, AioKafkaGroupConsumer]


def share_group_reads_from_earliest(bootstrap: str, group: str) -> None:
    """Sets the share group's share.auto.offset.reset to earliest before any member joins, so records written
    right after its members start are theirs however late their first fetch comes (at the default, latest,
    the share session opens at the log end of that first fetch: a test would have to guess how long to wait)."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer: its futures die with it
    admin.incremental_alter_configs([resource])[resource].result(30)


def stop_all(consumers) -> None:
    """Stops consumer threads (anything with stop_event, join and error) and fails on their errors."""
    for c in consumers:
        c.stop_event.set()
    for c in consumers:
        c.join(30)
    errors = [c.error for c in consumers if c.error]
    assert not errors, errors


def wait_for(predicate, timeout: float = 60, *, interval: float = 0.2, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


async def wait_for_async(predicate: Callable[[], bool | Awaitable[bool]], timeout: float = 60, *,
                         interval: float = 0.2, what: str = "condition") -> None:
    """wait_for inside an event loop: `predicate` may be a coroutine function, and the loop keeps running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if await result if inspect.isawaitable(result) else result:
            return
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")
