"""REST consumer instances (ADR 0034): each is an aiokafka consumer on this broker's event loop, a member of
its group through the inter-broker listener; the HTTP user's rights are checked here before each step,
because the consumer itself authenticates as the broker."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import IllegalStateError, KafkaError

from ...security.acls import Operation, ResourceType
from ...security.session import Session
from .bodies import ConsumerConfigBody, SubscriptionBody
from .errors import (
    CONSUMER_ALREADY_EXISTS,
    CONSUMER_INSTANCE_NOT_FOUND,
    ILLEGAL_STATE,
    KAFKA_ERROR,
    RestError,
    forbidden,
    unprocessable,
)
from .formats import from_bytes

if TYPE_CHECKING:
    from ...broker import Broker

log = logging.getLogger(__name__)
MAX_RECORDS_PER_READ = 10_000
READ_SLICE_S = 0.1  # a long poll gives the instance up this often (records)


@dataclass
class ConsumerInstance:
    group: str
    name: str
    settings: ConsumerConfigBody
    owner: str  # the principal that created it: no one else may use it
    consumer: AIOKafkaConsumer
    last_used: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    pattern: re.Pattern[str] | None = None
    pattern_seen: int = -1  # the metadata version the pattern was last matched against
    subscribed_once: bool = False  # its consumer has joined (or tried to join) the group by a subscription
    record_bytes: float = 1024.0  # the records' mean size so far: how many one read may take within max_bytes

    @contextlib.asynccontextmanager
    async def in_use(self) -> AsyncIterator[None]:
        """The instance to one request at a time. It is idle from the end of its last request, not the
        start: a long poll or a group join longer than consumer.instance.timeout.ms must not leave it to
        expire as its answer goes out (the expiry skips an instance in use)."""
        async with self.lock:
            try:
                yield
            finally:
                self.last_used = time.monotonic()


class ConsumerRegistry:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.instances: dict[tuple[str, str], ConsumerInstance] = {}
        self._expiry: asyncio.Task[None] | None = None

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> None:
        self._expiry = asyncio.get_running_loop().create_task(self._expire_idle())

    async def close(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expiry
        for key in list(self.instances):
            await self._close(key)

    async def _expire_idle(self) -> None:
        timeout_s = self.broker.config["consumer.instance.timeout.ms"] / 1000
        while True:
            await asyncio.sleep(min(timeout_s / 4, 5))
            now = time.monotonic()
            for key, instance in list(self.instances.items()):
                if now - instance.last_used > timeout_s and not instance.lock.locked():
                    log.info("REST consumer %s of group %s expired (unused for %.0f s)", key[1], key[0], timeout_s)
                    await self._close(key)

    async def _close(self, key: tuple[str, str]) -> None:
        instance = self.instances.pop(key, None)
        if instance is not None:
            with contextlib.suppress(Exception):
                await instance.consumer.stop()  # leaves the group (and commits, with auto commit)

    async def create(self, group: str, body: ConsumerConfigBody, session: Session) -> ConsumerInstance:
        self._allow_group(session, group)
        name = body.name or body.id or f"rest-consumer-{uuid.uuid4()}"
        if (group, name) in self.instances:
            raise RestError(409, CONSUMER_ALREADY_EXISTS, "Consumer with specified consumer ID already exists in the "
                                                          "specified consumer group.")
        if len(self.instances) >= self.broker.config["http.consumer.max.instances"]:
            raise RestError(429, 42902, f"this broker already has {len(self.instances)} consumer instances "
                                        "(http.consumer.max.instances); delete unused ones or use another broker")
        consumer = self._consumer(group, name, body)
        instance = ConsumerInstance(group, name, body, str(session.principal), consumer)
        self.instances[(group, name)] = instance  # the name is taken while the consumer starts
        try:
            await self._start(consumer)
        except BaseException:
            self.instances.pop((group, name), None)
            raise
        return instance

    @staticmethod
    async def _start(consumer: AIOKafkaConsumer) -> None:
        try:
            await consumer.start()
        except BaseException as exc:
            with contextlib.suppress(Exception):
                await consumer.stop()
            if isinstance(exc, KafkaError):
                raise RestError(500, KAFKA_ERROR, f"the consumer could not reach the cluster: {exc}") from None
            raise

    def _consumer(self, group: str, name: str, settings: ConsumerConfigBody) -> AIOKafkaConsumer:
        info = next(b for b in self.broker.metadata.brokers if b.node_id == self.broker.node_id) \
            if self.broker.metadata is not None else None
        bootstrap = f"{info.host}:{info.port}" if info is not None else f"127.0.0.1:{self.broker.port}"
        security = self.broker.security.client
        extra: dict[str, Any] = {}
        if security.sasl:
            extra.update(sasl_mechanism=security.mechanism, sasl_plain_username=security.username,
                         sasl_plain_password=security.password)
        instance_timeout = self.broker.config["consumer.instance.timeout.ms"]
        return AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, client_id=f"dm-rest-{name}",
            enable_auto_commit=settings.auto_commit_enable, auto_offset_reset=settings.auto_offset_reset,
            fetch_min_bytes=settings.fetch_min_bytes or 1, security_protocol=security.protocol,
            ssl_context=security.ssl_context,
            # a REST client polls when it likes: the instance's own expiry decides when it is gone
            max_poll_interval_ms=instance_timeout + 60_000,
            metadata_max_age_ms=30_000, **extra)

    async def delete(self, group: str, name: str, session: Session) -> None:
        self.get(group, name, session)
        await self._close((group, name))

    def get(self, group: str, name: str, session: Session) -> ConsumerInstance:
        instance = self.instances.get((group, name))
        if instance is None or instance.owner != str(session.principal):
            raise self._not_found(group, name)
        instance.last_used = time.monotonic()
        return instance

    def _not_found(self, group: str, name: str) -> RestError:
        return RestError(404, CONSUMER_INSTANCE_NOT_FOUND,
                         f"Consumer instance not found. (instance {name} of group {group} is not on broker "
                         f"{self.broker.node_id}: an instance lives on the broker that created it, see its "
                         "base_uri)")

    # -- authorization (the consumer itself is the broker) ----------------------------------------

    def _allow_group(self, session: Session, group: str) -> None:
        if not self.broker.security.allowed(session, Operation.READ, ResourceType.GROUP, group):
            raise forbidden(f"Not authorized to access group: {group}")

    def _allow_topics(self, session: Session, topics: list[str]) -> None:
        denied = [t for t in topics if not self.broker.security.allowed(session, Operation.READ, ResourceType.TOPIC, t)]
        if denied:
            raise forbidden(f"Not authorized to access topics: [{', '.join(sorted(denied))}]")

    def _readable(self, session: Session, pattern: re.Pattern[str]) -> list[str]:
        md = self.broker.metadata
        names = sorted(md.topics) if md is not None else []
        return [t for t in names if pattern.fullmatch(t) and not t.startswith("__")
                and self.broker.security.allowed(session, Operation.READ, ResourceType.TOPIC, t)]

    # -- subscription and assignment --------------------------------------------------------------

    async def subscribe(self, instance: ConsumerInstance, body: SubscriptionBody, session: Session) -> None:
        if (body.topics is None) == (body.topic_pattern is None):
            raise unprocessable("give either topics (a list of names) or topic_pattern (a regular expression)")
        async with instance.in_use():
            try:
                if body.topics is not None:
                    self._allow_topics(session, body.topics)
                    instance.pattern = None
                    instance.consumer.subscribe(topics=body.topics)
                    instance.subscribed_once = True
                else:
                    try:
                        instance.pattern = re.compile(body.topic_pattern or "")
                    except re.error as exc:
                        raise unprocessable(f"topic_pattern is not a regular expression: {exc}") from None
                    instance.pattern_seen = -1
                    self._follow_pattern(instance, session)
            except IllegalStateError as exc:
                raise RestError(409, ILLEGAL_STATE, f"Illegal state: {exc}") from None

    def _follow_pattern(self, instance: ConsumerInstance, session: Session) -> None:
        """Subscribes to the topics the pattern matches now, among those the user may read (a pattern never
        reaches past the user's rights, as Kafka's filtered metadata has it)."""
        md = self.broker.metadata
        version = md.version if md is not None else -1
        if instance.pattern is None or version == instance.pattern_seen:
            return
        instance.pattern_seen = version
        topics = self._readable(session, instance.pattern)
        if set(topics) == instance.consumer.subscription():
            return
        if topics:
            instance.consumer.subscribe(topics=topics)
            instance.subscribed_once = True
        else:
            instance.consumer.unsubscribe()

    async def unsubscribe(self, instance: ConsumerInstance) -> None:
        async with instance.in_use():
            instance.pattern = None
            instance.consumer.unsubscribe()

    async def _renew(self, instance: ConsumerInstance) -> None:
        """A new consumer for an instance that leaves its group subscription for a manual assignment.
        aiokafka's group routine may still be joining for the old subscription, and when it finds the
        manual one in its place it fails for good (an AssertionError in begin_reassignment: every later
        call of the instance then failed). Positions are not lost: they come from the group's committed
        offsets, as they would after any assignment."""
        old = instance.consumer
        fresh = self._consumer(instance.group, instance.name, instance.settings)
        await self._start(fresh)
        instance.consumer, instance.subscribed_once = fresh, False
        with contextlib.suppress(Exception):
            await old.stop()

    def subscription(self, instance: ConsumerInstance) -> list[str]:
        return sorted(instance.consumer.subscription())

    async def assign(self, instance: ConsumerInstance, partitions: list[TopicPartition], session: Session) -> None:
        self._allow_topics(session, sorted({tp.topic for tp in partitions}))
        async with instance.in_use():
            if instance.subscribed_once and not instance.consumer.subscription():
                await self._renew(instance)
            try:
                instance.pattern = None
                instance.consumer.assign(partitions)
            except IllegalStateError as exc:
                raise RestError(409, ILLEGAL_STATE, f"Illegal state: {exc}") from None

    # -- reading ----------------------------------------------------------------------------------

    async def records(self, instance: ConsumerInstance, timeout_ms: int | None, max_bytes: int | None,
                      session: Session) -> list[dict[str, Any]]:
        """A long poll, taken in slices of READ_SLICE_S: the instance is free between them, so a commit, a
        seek or a new assignment sent while a read waits is served within a slice instead of after the
        whole timeout (Confluent's REST Proxy polls its consumer in short steps for the same reason). Each
        slice sees the instance as it is then; the read answers as soon as one brings records."""
        limit = min(max_bytes or self.broker.config["consumer.request.max.bytes"],
                    self.broker.config["consumer.request.max.bytes"])
        default_wait = self.broker.config["consumer.request.timeout.ms"]
        configured = instance.settings.request_timeout_ms
        wait = (default_wait if configured is None else configured) if timeout_ms is None else min(
            timeout_ms, default_wait * 30)
        deadline = time.monotonic() + wait / 1000
        while True:
            slice_ms = max(0, min(READ_SLICE_S, deadline - time.monotonic()) * 1000)
            async with instance.in_use():
                out = await self._read_slice(instance, slice_ms, limit, session)
            if out is not None:
                return out
            if time.monotonic() >= deadline:
                return []

    async def _read_slice(self, instance: ConsumerInstance, slice_ms: float, limit: int,
                          session: Session) -> list[dict[str, Any]] | None:
        """Records read within `slice_ms`; None when none came."""
        if self.instances.get((instance.group, instance.name)) is not instance:
            raise self._not_found(instance.group, instance.name)  # deleted or expired while the read waited
        self._follow_pattern(instance, session)
        consumer = instance.consumer
        if not consumer.subscription() and not consumer.assignment():
            if instance.pattern is not None:
                await asyncio.sleep(slice_ms / 1000)  # nothing matches yet: look again next slice
                return None
            raise RestError(409, ILLEGAL_STATE, "Illegal state: the consumer instance is neither subscribed "
                                                "to topics nor assigned partitions")
        self._allow_topics(session, sorted({tp.topic for tp in consumer.assignment()}))
        # Taking only what fits leaves the rest in the consumer's buffer for the next request; a seek
        # back would throw the prefetched records away and fetch them again.
        wanted = max(1, min(MAX_RECORDS_PER_READ, int(limit // instance.record_bytes)))
        try:
            batches = await consumer.getmany(timeout_ms=int(slice_ms), max_records=wanted)
        except KafkaError as exc:
            raise RestError(500, KAFKA_ERROR, f"reading failed: {exc}") from None
        if not batches:
            return None
        out: list[dict[str, Any]] = []
        size = 0
        fmt = instance.settings.format
        for tp, records in batches.items():
            for record in records:
                length = len(record.key or b"") + len(record.value or b"")
                if out and size + length > limit:  # larger records than so far: the rest is fetched again
                    consumer.seek(tp, record.offset)
                    break
                size += length
                where = f"{tp.topic}-{tp.partition}@{record.offset}"
                item: dict[str, Any] = {
                    "topic": tp.topic, "key": from_bytes(fmt, record.key, where),
                    "value": from_bytes(fmt, record.value, where), "partition": tp.partition,
                    "offset": record.offset, "timestamp": record.timestamp}
                if record.headers:
                    item["headers"] = [{"key": k, "value": from_bytes("binary", v, where)}
                                       for k, v in record.headers]
                out.append(item)
        if out:
            instance.record_bytes = 0.8 * instance.record_bytes + 0.2 * max(size / len(out), 1)
        return out

    # -- offsets and positions --------------------------------------------------------------------

    async def commit(self, instance: ConsumerInstance, offsets: dict[TopicPartition, tuple[int, str]] | None,
                     session: Session) -> None:
        """`offsets` maps partitions to the last record consumed (v2 commits the next one); None commits
        what the instance has read so far."""
        self._allow_group(session, instance.group)
        async with instance.in_use():
            try:
                if offsets is None:
                    await instance.consumer.commit()
                else:
                    self._allow_topics(session, sorted({tp.topic for tp in offsets}))
                    await instance.consumer.commit({tp: (offset + 1, meta) for tp, (offset, meta) in offsets.items()})
            except IllegalStateError as exc:
                raise RestError(409, ILLEGAL_STATE, f"Illegal state: {exc}") from None
            except KafkaError as exc:
                raise RestError(500, KAFKA_ERROR, f"the commit failed: {exc}") from None

    async def committed(self, instance: ConsumerInstance, partitions: list[TopicPartition],
                        session: Session) -> list[dict[str, Any]]:
        self._allow_group(session, instance.group)
        self._allow_topics(session, sorted({tp.topic for tp in partitions}))
        out = []
        async with instance.in_use():
            for tp in partitions:
                try:
                    offset = await instance.consumer.committed(tp)
                except KafkaError as exc:
                    raise RestError(500, KAFKA_ERROR, f"reading committed offsets failed: {exc}") from None
                out.append({"topic": tp.topic, "partition": tp.partition, "offset": -1 if offset is None else offset,
                            "metadata": ""})
        return out

    async def seek(self, instance: ConsumerInstance, offsets: dict[TopicPartition, int]) -> None:
        async with instance.in_use():
            self._check_assigned(instance, list(offsets))
            for tp, offset in offsets.items():
                instance.consumer.seek(tp, offset)

    async def seek_to(self, instance: ConsumerInstance, partitions: list[TopicPartition], end: bool) -> None:
        """No partitions named: every assigned one, as Kafka's seekToBeginning/seekToEnd (and nothing
        when none is assigned)."""
        async with instance.in_use():
            self._check_assigned(instance, partitions)
            if not partitions and not instance.consumer.assignment():
                return  # aiokafka asserts here
            try:
                if end:
                    await instance.consumer.seek_to_end(*partitions)
                else:
                    await instance.consumer.seek_to_beginning(*partitions)
            except KafkaError as exc:
                raise RestError(500, KAFKA_ERROR, f"seeking failed: {exc}") from None

    @staticmethod
    def _check_assigned(instance: ConsumerInstance, partitions: list[TopicPartition]) -> None:
        missing = [f"{tp.topic}-{tp.partition}" for tp in partitions if tp not in instance.consumer.assignment()]
        if missing:
            raise RestError(409, ILLEGAL_STATE, f"Illegal state: No current assignment for partition(s) "
                                                f"{', '.join(missing)}")
