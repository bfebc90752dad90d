"""REST consumer instances (ADR 0034): each is an aiokafka consumer on this broker's event loop, a member of
its group through the inter-broker listener; the HTTP user's rights are checked here before each step,
because the consumer itself authenticates as the broker."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import IllegalStateError, KafkaError

from ...protocol import offload
from ...regexes import InvalidRegex, TopicPattern, compile_topic_regex
from ...security.acls import Operation, ResourceType
from ...security.session import Session
from . import jsonio
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
CLOSE_WAIT_S = 30.0  # how long closing an instance waits for the request using it
READ_SLICE_S = 0.1  # a long poll gives the instance up this often (records)
EXPIRY_CHECK_S = 1.0  # idle instances are looked for this often


NO_RECORDS = b"[]"
# An answer whose keys and values take more than this is built on the codec thread.
LARGE_ANSWER_BYTES = 1 << 20

@dataclass
class ConsumerInstance:
    group: str
    name: str
    settings: ConsumerConfigBody
    owner: str  # the principal that created it: no one else may use it
    consumer: AIOKafkaConsumer
    last_used: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    pattern: TopicPattern | None = None
    pattern_seen: int = -1  # the metadata version the pattern was last matched against
    used: bool = False  # its consumer has had a subscription or an assignment (see _fresh_consumer)
    assigned: bool = False  # by hand (assignments), not by a subscription: the two exclude each other
    record_bytes: float = 1024.0  # the records' mean size so far: how many one read may take within max_bytes



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
        # Together: each may wait up to CLOSE_WAIT_S for a request still using it, and a shutdown must not
        # wait that long once per instance.
        await asyncio.gather(*(self._close(key) for key in list(self.instances)))

    async def _expire_idle(self) -> None:
        timeout_s = self.broker.config["consumer.instance.timeout.ms"] / 1000
        while True:
            # An instance goes within a second of its timeout: a client that looks just after it must not
            # find it still there (and keep it alive by looking). The look is a pass over at most
            # http.consumer.max.instances entries.
            await asyncio.sleep(min(timeout_s / 4, EXPIRY_CHECK_S))
            now = time.monotonic()
            for key, instance in list(self.instances.items()):
                if now - instance.last_used > timeout_s and not instance.lock.locked():
                    log.info("REST consumer %s of group %s expired (unused for %.0f s)", key[1], key[0], timeout_s)
                    await self._close(key)

    async def _close(self, key: tuple[str, str]) -> None:
        """Forgets the instance at once (later requests get 404), then stops its consumer once the request
        using it, if any, is done with it: stopping a consumer under a running request failed that request
        with aiokafka's internals gone (AttributeError), and under a starting one left it hanging."""
        instance = self.instances.pop(key, None)
        if instance is None:
            return
        try:
            await asyncio.wait_for(instance.lock.acquire(), CLOSE_WAIT_S)
        except TimeoutError:
            log.warning("REST consumer %s of group %s: closed while a request still used it", key[1], key[0])
        else:
            instance.lock.release()
        with contextlib.suppress(Exception):
            await instance.consumer.stop()  # leaves the group (and commits, with auto commit)

    @contextlib.asynccontextmanager
    async def _using(self, instance: ConsumerInstance) -> AsyncIterator[None]:
        """The instance to one request at a time, and only while it is registered (a request that waited
        for a deleted or expired one gets 404). It is idle from the end of its last request, not the
        start: a long poll or a group join longer than consumer.instance.timeout.ms must not leave it to
        expire as its answer goes out (the expiry skips an instance in use)."""
        async with instance.lock:
            if self.instances.get((instance.group, instance.name)) is not instance:
                raise self._not_found(instance.group, instance.name)
            try:
                yield
            finally:
                instance.last_used = time.monotonic()

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
        async with instance.lock:  # requests for it (a DELETE too) wait until it has started
            try:
                await self._start(consumer)
            except BaseException:
                if self.instances.get((group, name)) is instance:
                    del self.instances[(group, name)]
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

    def _readable(self, session: Session, pattern: TopicPattern) -> list[str]:
        md = self.broker.metadata
        names = sorted(md.topics) if md is not None else []
        return [t for t in names if pattern.fullmatch(t) and not t.startswith("__")
                and self.broker.security.allowed(session, Operation.READ, ResourceType.TOPIC, t)]

    # -- subscription and assignment --------------------------------------------------------------

    async def subscribe(self, instance: ConsumerInstance, body: SubscriptionBody, session: Session) -> None:
        if (body.topics is None) == (body.topic_pattern is None):
            raise unprocessable("give either topics (a list of names) or topic_pattern (a regular expression)")
        pattern = None
        if body.topic_pattern is not None:
            try:
                pattern = compile_topic_regex(body.topic_pattern)
            except InvalidRegex as exc:
                raise unprocessable(f"topic_pattern is not a regular expression: {exc}") from None
        async with self._using(instance):
            if instance.assigned:
                raise RestError(409, ILLEGAL_STATE, "Illegal state: Subscription to topics, partitions and pattern "
                                                    "are mutually exclusive (the instance has assigned partitions)")
            if body.topics is not None:
                self._allow_topics(session, body.topics)
                if instance.pattern is None and set(body.topics) == instance.consumer.subscription():
                    return  # the same subscription: nothing changes
                await self._fresh_consumer(instance)
                instance.pattern = None
                instance.consumer.subscribe(topics=body.topics)
                instance.used = True
            else:
                await self._fresh_consumer(instance)
                instance.pattern, instance.pattern_seen = pattern, -1
                await self._follow_pattern(instance, session)

    async def _follow_pattern(self, instance: ConsumerInstance, session: Session) -> None:
        """Subscribes to the topics the pattern matches now, among those the user may read (a pattern never
        reaches past the user's rights, as Kafka's filtered metadata has it). A change takes a fresh
        consumer, as any change of subscription does: for the group it is a rebalance, as in Kafka when a
        new topic matches."""
        md = self.broker.metadata
        version = md.version if md is not None else -1
        if instance.pattern is None or version == instance.pattern_seen:
            return
        instance.pattern_seen = version
        topics = self._readable(session, instance.pattern)
        if set(topics) == instance.consumer.subscription():
            return
        await self._fresh_consumer(instance)
        if topics:
            instance.consumer.subscribe(topics=topics)
            instance.used = True

    async def unsubscribe(self, instance: ConsumerInstance) -> None:
        async with self._using(instance):
            instance.pattern = None
            instance.assigned = False
            await self._fresh_consumer(instance)  # a consumer that never subscribed: unsubscribed

    async def _fresh_consumer(self, instance: ConsumerInstance,
                              keep: list[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """A new consumer in place of one that has had a subscription or an assignment, before the next
        change of either. aiokafka's group routine fails for good (an AssertionError, every later call of
        the instance "Unexpected error during coordination") when the subscription or assignment changes
        while it awaits, as it does while it joins or looks for the coordinator: subscribe, unsubscribe
        and assign in quick succession broke one instance in three. A consumer that only ever sees one
        subscription or assignment never meets that. Positions come from the group's committed offsets
        (or auto.offset.reset), as after Kafka's eager rebalance; those of `keep`, partitions assigned by
        hand before and after, are returned for the caller to seek to, as Kafka's assign() keeps them."""
        if not instance.used:
            return {}
        old = instance.consumer
        positions: dict[TopicPartition, int] = {}
        held = old.assignment()
        for tp in keep or ():
            if tp in held:
                with contextlib.suppress(Exception):
                    positions[tp] = await asyncio.wait_for(old.position(tp), 2)
        fresh = self._consumer(instance.group, instance.name, instance.settings)
        await self._start(fresh)
        instance.consumer, instance.used = fresh, False
        with contextlib.suppress(Exception):
            await old.stop()
        return positions

    def subscription(self, instance: ConsumerInstance) -> list[str]:
        return sorted(instance.consumer.subscription())

    async def assign(self, instance: ConsumerInstance, partitions: list[TopicPartition], session: Session) -> None:
        self._allow_topics(session, sorted({tp.topic for tp in partitions}))
        async with self._using(instance):
            subscribed = instance.pattern is not None or (not instance.assigned and instance.consumer.subscription())
            if subscribed:
                raise RestError(409, ILLEGAL_STATE, "Illegal state: Subscription to topics, partitions and pattern "
                                                    "are mutually exclusive (the instance is subscribed)")
            kept = await self._fresh_consumer(instance, keep=partitions)
            instance.pattern = None
            instance.consumer.assign(partitions)
            instance.used = instance.assigned = True
            for tp, offset in kept.items():
                instance.consumer.seek(tp, offset)

    # -- reading ----------------------------------------------------------------------------------

    async def records(self, instance: ConsumerInstance, timeout_ms: int | None, max_bytes: int | None,
                      session: Session) -> bytes:
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
        first = True
        while True:
            slice_ms = max(0, min(READ_SLICE_S, deadline - time.monotonic()) * 1000)
            async with self._using(instance):
                out = await self._read_slice(instance, slice_ms, limit, session, first)
            if out is not None:
                return out
            if time.monotonic() >= deadline:
                return NO_RECORDS
            first = False

    async def _read_slice(self, instance: ConsumerInstance, slice_ms: float, limit: int, session: Session,
                          first: bool) -> bytes | None:
        """Records read within `slice_ms`; None when none came. A read that was valid when it came answers
        [] if a request between its slices leaves the instance neither subscribed nor assigned."""
        await self._follow_pattern(instance, session)
        consumer = instance.consumer
        if not consumer.subscription() and not consumer.assignment():
            if instance.pattern is not None:
                await asyncio.sleep(slice_ms / 1000)  # nothing matches yet: look again next slice
                return None
            if not first:
                return NO_RECORDS
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
        chosen: list[tuple[TopicPartition, Any]] = []
        size = 0
        for tp, records in batches.items():
            for record in records:
                length = len(record.key or b"") + len(record.value or b"")
                if chosen and size + length > limit:  # larger records than so far: the rest is fetched again
                    consumer.seek(tp, record.offset)
                    break
                size += length
                chosen.append((tp, record))
        if chosen:
            instance.record_bytes = 0.8 * instance.record_bytes + 0.2 * max(size / len(chosen), 1)
        fmt = instance.settings.format
        if size <= LARGE_ANSWER_BYTES:
            return answer_body(fmt, chosen)
        # base64 (which lets go of the interpreter) and the JSON of a large answer on the codec thread: a
        # 30 MiB record took 132 ms of the loop (issue 65)
        body, _ = await offload.on_codec_thread(answer_body, fmt, chosen)
        return body


    # -- offsets and positions --------------------------------------------------------------------

    async def commit(self, instance: ConsumerInstance, offsets: dict[TopicPartition, tuple[int, str]] | None,
                     session: Session) -> None:
        """`offsets` maps partitions to the last record consumed (v2 commits the next one); None commits
        what the instance has read so far."""
        self._allow_group(session, instance.group)
        async with self._using(instance):
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
        async with self._using(instance):
            for tp in partitions:
                try:
                    offset = await instance.consumer.committed(tp)
                except KafkaError as exc:
                    raise RestError(500, KAFKA_ERROR, f"reading committed offsets failed: {exc}") from None
                out.append({"topic": tp.topic, "partition": tp.partition, "offset": -1 if offset is None else offset,
                            "metadata": ""})
        return out

    async def seek(self, instance: ConsumerInstance, offsets: dict[TopicPartition, int]) -> None:
        async with self._using(instance):
            self._check_assigned(instance, list(offsets))
            for tp, offset in offsets.items():
                instance.consumer.seek(tp, offset)

    async def seek_to(self, instance: ConsumerInstance, partitions: list[TopicPartition], end: bool) -> None:
        """No partitions named: every assigned one, as Kafka's seekToBeginning/seekToEnd (and nothing
        when none is assigned)."""
        async with self._using(instance):
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


def answer_body(fmt: str, chosen: list[tuple[TopicPartition, Any]]) -> bytes:
    """The JSON answer of a records request: each record with its key and value in the instance's format."""
    out: list[dict[str, Any]] = []
    for tp, record in chosen:
        where = f"{tp.topic}-{tp.partition}@{record.offset}"
        item: dict[str, Any] = {
            "topic": tp.topic, "key": from_bytes(fmt, record.key, where),
            "value": from_bytes(fmt, record.value, where), "partition": tp.partition,
            "offset": record.offset, "timestamp": record.timestamp}
        if record.headers:
            item["headers"] = [{"key": k, "value": from_bytes("binary", v, where)} for k, v in record.headers]
        out.append(item)
    return jsonio.dumps(out)
