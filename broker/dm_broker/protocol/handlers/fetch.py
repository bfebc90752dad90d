"""Fetch: long-poll until min_bytes are available or max_wait passes, then return raw batches.

Batches go out exactly as stored; the last one may be cut at max_bytes (clients drop a partial
trailing batch, as with Kafka). Reads never go past the high watermark, and for read_committed not
past the last stable offset, with the aborted transactions in the range listed for the client to
drop. Incremental fetch sessions (KIP-227, fetch_sessions.py) let a fetcher name only what changed and
hear only what changed; a fetch without one names and hears every partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from ...log.segment import FileSlice
from ...quotas.entities import CONSUMER_BYTE_RATE
from ...replication.partition import Partition
from ...replication.throttle import ByteRateQuota
from ...security.acls import CLUSTER_NAME, Operation, ResourceType
from ...steps import PARTITIONS_PER_STEP
from ..codec import EncodedResponse
from ..dispatch import RequestContext
from ..fetch_encoder import FLEXIBLE_FROM, TOPIC_IDS_FROM, PartitionResult, TopicResult, encode_fetch_response
from ..fetch_sessions import INITIAL_EPOCH, FetchSession, SessionKey, next_epoch

READ_COMMITTED = 1
SESSIONS_FROM = 7
# An answer in a fetch session carries records for at most this many partitions (ADR 0057). Reading and
# encoding them here, and appending them on a follower, is work on the event loop in one piece whose size
# is otherwise every partition that changed since the last fetch: at 10,000 partitions under load, a few
# thousand. The rest stay marked, go first in the next answer, and that answer follows at once.
PARTITIONS_WITH_RECORDS_PER_ANSWER = PARTITIONS_PER_STEP
NOTHING_OWED: frozenset[SessionKey] = frozenset()


class _PartitionRead:
    __slots__ = ("error", "key", "partition", "request", "size", "skipped", "slices", "throttled")

    def __init__(self, request: Any, partition: Partition | None, error: ErrorCode) -> None:
        self.request = request
        self.partition = partition
        self.error = error
        self.slices: list[FileSlice] = []
        self.size = 0
        self.throttled = False  # a replica fetch counted against leader.replication.throttled.rate
        self.skipped = False  # not read: the response was full, or the replication throttle was spent
        self.key: SessionKey | None = None


def _check_epoch(part: Partition, current_leader_epoch: int) -> ErrorCode:
    if current_leader_epoch < 0 or current_leader_epoch == part.leader_epoch:
        return ErrorCode.none
    if current_leader_epoch < part.leader_epoch:
        return ErrorCode.fenced_leader_epoch
    return ErrorCode.unknown_leader_epoch


def _in_turn(reads: list[list[_PartitionRead]], owed: set[SessionKey] | frozenset[SessionKey]
             ) -> Iterable[_PartitionRead]:
    """The reads, those a session's last answer skipped first."""
    if not owed:
        return (r for topic_reads in reads for r in topic_reads)
    flat = [r for topic_reads in reads for r in topic_reads]
    return [*(r for r in flat if r.key in owed), *(r for r in flat if r.key not in owed)]


def _read_all(reads: list[list[_PartitionRead]], max_bytes: int, committed: bool, replica: bool,
              quota: ByteRateQuota | None = None, session: FetchSession | None = None) -> int:
    """Reads every partition's records within the answer's budgets; returns the bytes read. In a session
    at most PARTITIONS_WITH_RECORDS_PER_ANSWER partitions get records, the rest are skipped (a fetch without
    one gets what it named, the size the client chose)."""
    total = 0
    first = True
    with_records = 0
    room = PARTITIONS_WITH_RECORDS_PER_ANSWER if session is not None else None
    allowance = quota.available() if quota is not None else 0
    for r in _in_turn(reads, session.owed if session is not None else NOTHING_OWED):
        part = r.partition
        if part is None or r.error != ErrorCode.none:
            continue
        if part.closed:
            r.error = ErrorCode.unknown_topic_or_partition
            continue
        if not part.is_leader:
            r.error = ErrorCode.not_leader_or_follower
            continue
        offset = r.request.fetch_offset
        log = part.log
        # Followers replicate everything; consumers see only what the ISR has (the HW).
        limit = log.log_end_offset if replica else part.last_stable_offset if committed else part.high_watermark
        if offset < log.log_start_offset or offset > log.log_end_offset:
            r.error = ErrorCode.offset_out_of_range
            continue
        budget = min(r.request.partition_max_bytes, max_bytes - total)
        if r.throttled:
            if allowance <= 0:  # over quota: the replica gets nothing of it this time (as Kafka)
                r.slices, r.size, r.skipped = [], 0, True
                continue
            budget = min(budget, allowance)
        if (budget <= 0 and not first) or with_records == room:
            r.slices, r.size, r.skipped = [], 0, True
            continue
        result = log.read(offset, max(budget, 0), limit, min_one_batch=first)
        r.slices, r.size, r.skipped = result.slices, result.size, False
        if result.size:
            total += result.size
            first = False
            with_records += 1
            if r.throttled:
                allowance -= result.size
    return total


async def handle(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    committed = getattr(req, "isolation_level", 0) == READ_COMMITTED
    # A follower says who it is in replica_id, or from v15 on in the replica_state tagged field.
    replica_id = req.replica_id if hasattr(req, "replica_id") else req.replica_state.replica_id
    replica = replica_id >= 0
    fetch = _Fetch(ctx, replica_id)

    session: FetchSession | None = None
    incremental = False
    if ctx.version >= SESSIONS_FROM:
        sessions = broker.fetch_sessions
        owner = (str(ctx.session.principal), replica_id)
        if req.session_epoch > INITIAL_EPOCH:
            session = sessions.get(req.session_id, owner)
            error = None
            if session is None:
                error = ErrorCode.fetch_session_id_not_found
            elif session.uses_topic_ids != (ctx.version >= TOPIC_IDS_FROM):
                error = ErrorCode.fetch_session_topic_id_error
            elif session.epoch != req.session_epoch:
                error = ErrorCode.invalid_fetch_session_epoch
            if error is not None:
                broker.metrics.request_errors.labels("fetch", error.name).inc()
                return _encoded(ctx, encode_fetch_response(ctx.version, ctx.header.correlation_id,
                                                             error.value, 0, []))
            incremental = True
        else:
            if req.session_id:
                sessions.remove(req.session_id, owner)  # closed (epoch -1) or replaced (epoch 0)
            if req.session_epoch == INITIAL_EPOCH:
                session = sessions.create(owner, ctx.version >= TOPIC_IDS_FROM)
        if session is not None:
            session.epoch = next_epoch(req.session_epoch)

    if incremental:
        keys = await fetch.apply_to_session(session, req)
    else:
        await fetch.add_request(req, session)
        keys = set()

    # Kafka's fetch.max.bytes: a client cannot ask for a larger answer (a TLS answer is read into memory);
    # the first batch still goes out whole however large (KIP-74), so nothing is stuck.
    max_bytes = min(req.max_bytes if req.max_bytes > 0 else 0x7FFFFFFF, broker.config["fetch.max.bytes"])
    # Throttling only matters under a rate limit: without one no partition is looked at for it.
    quota = broker.leader_quota if replica and not broker.leader_quota.unlimited() else None
    if replica:
        _track_follower(broker, replica_id, fetch.reads, quota is not None, session)
    total = _read_all(fetch.reads, max_bytes, committed, replica, quota, session)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + req.max_wait.total_seconds()
    while total < req.min_bytes and not _has_errors(fetch.reads):
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        if session is None:
            await _wait_for_data(fetch.reads, remaining)
        else:
            await session.wait(remaining)
            marked = session.take_dirty()  # a full fetch reads all of its partitions again anyway
            if session.closed:  # replaced or evicted meanwhile: answered without it
                session = None
            elif incremental:
                added = [fetch.add_cached(session, key) for key in marked
                         if key not in keys and key in session.partitions]
                keys.update(r.key for r in added)
                if replica:
                    _track_follower(broker, replica_id, [added], quota is not None, session)
        total = _read_all(fetch.reads, max_bytes, committed, replica, quota, session)

    if not replica and _throttled(ctx, fetch, session, incremental):
        # Over consumer_byte_rate: nothing is sent this time (as Kafka), so nothing is counted; the
        # session keeps every partition read here to be looked at again.
        return _encoded(ctx, encode_fetch_response(ctx.version, ctx.header.correlation_id, 0,
                                                     session.id if session is not None and incremental else 0, []))
    topics = await _results(ctx, fetch, session, incremental, committed, replica, quota)
    response_session = session.id if session is not None else 0
    return _encoded(ctx, encode_fetch_response(ctx.version, ctx.header.correlation_id, 0, response_session,
                                                 topics))


def _encoded(ctx: RequestContext, chunks: list) -> EncodedResponse:
    return EncodedResponse(chunks, flexible_header=ctx.version >= FLEXIBLE_FROM, throttle_first=True)


def _throttled(ctx: RequestContext, fetch: _Fetch, session: FetchSession | None, incremental: bool) -> bool:
    quotas = ctx.broker.quotas
    if not quotas.limits(CONSUMER_BYTE_RATE):  # the common case: no sum over the partitions read
        return False
    size = sum(r.size for topic_reads in fetch.reads for r in topic_reads)
    if ctx.record_quota(CONSUMER_BYTE_RATE, size) <= 0:
        return False
    quotas.unrecord(CONSUMER_BYTE_RATE, ctx.session.principal.name, ctx.client_id, size)
    if session is not None:
        if incremental:
            session.dirty.update(r.key for topic_reads in fetch.reads for r in topic_reads)
        else:  # a session opened by a throttled full fetch: not kept (the client will open another)
            ctx.broker.fetch_sessions.remove(session.id, session.owner)
    return True


class _Fetch:
    """The partitions one request reads, grouped by topic in the order they are answered."""

    def __init__(self, ctx: RequestContext, replica_id: int) -> None:
        self.ctx = ctx
        self.broker = ctx.broker
        self.replica_id = replica_id
        self.replica = replica_id >= 0
        # Kafka's checks: a follower needs CLUSTER_ACTION on the cluster, a consumer READ on each topic.
        self.follower_denied = self.replica and ctx.denied(Operation.CLUSTER_ACTION, ResourceType.CLUSTER,
                                                           CLUSTER_NAME)
        self.by_topic: dict[str, tuple[str, bytes, list[_PartitionRead]]] = {}  # topic key -> name, id, reads
        self._denied: dict[str, bool] = {}

    @property
    def reads(self) -> list[list[_PartitionRead]]:
        return [reads for _, _, reads in self.by_topic.values()]

    def _topic(self, topic: Any) -> tuple[str, str, bytes]:
        """(session key, name, 16-byte id) of a request's topic. From v13 on a topic is named by its id:
        an id the metadata does not know has no name (UNKNOWN_TOPIC_ID)."""
        if self.ctx.version < TOPIC_IDS_FROM:
            return topic.topic, topic.topic, bytes(16)
        doc = self.broker.topic_by_id(topic.topic_id) if topic.topic_id else None
        return str(topic.topic_id), getattr(doc, "name", ""), topic.topic_id.bytes if topic.topic_id else bytes(16)

    def _name_of(self, topic_key: str) -> str:
        if self.ctx.version < TOPIC_IDS_FROM:
            return topic_key
        try:
            doc = self.broker.topic_by_id(uuid.UUID(topic_key))
        except ValueError:
            return ""
        return getattr(doc, "name", "")

    async def add_request(self, req: Any, session: FetchSession | None) -> None:
        for topic in req.topics:
            topic_key, name, topic_id = self._topic(topic)
            for p in topic.partitions:
                await self.ctx.turn()
                key = session.upsert(topic_key, topic_id, p) if session is not None else None
                request = session.partitions[key] if session is not None else p
                self._add(topic_key, name, topic_id, key, request, session)

    async def apply_to_session(self, session: FetchSession, req: Any) -> set[SessionKey]:
        """An incremental request: updates the session with the partitions it names, drops the ones it
        forgets, and reads those plus every partition marked since the last fetch."""
        named: set[SessionKey] = set()
        for topic in req.topics:
            topic_key, _, topic_id = self._topic(topic)
            for p in topic.partitions:
                await self.ctx.turn()
                named.add(session.upsert(topic_key, topic_id, p))
        for forgotten in req.forgotten_topics_data:
            topic_key = forgotten.topic if self.ctx.version < TOPIC_IDS_FROM else str(forgotten.topic_id)
            await self.ctx.turn(len(forgotten.partitions))
            for index in forgotten.partitions:
                session.forget((topic_key, index))
                named.discard((topic_key, index))
        keys = named | session.take_dirty()
        for key in keys:
            await self.ctx.turn()
            if key in session.partitions:
                self.add_cached(session, key)
        return keys

    def add_cached(self, session: FetchSession, key: SessionKey) -> _PartitionRead:
        topic_key = key[0]
        entry = self.by_topic.get(topic_key)
        name = entry[0] if entry is not None else self._name_of(topic_key)
        return self._add(topic_key, name, session.topic_ids.get(topic_key, bytes(16)), key,
                         session.partitions[key], session)

    def _add(self, topic_key: str, name: str, topic_id: bytes, key: SessionKey | None, request: Any,
             session: FetchSession | None) -> _PartitionRead:
        entry = self.by_topic.get(topic_key)
        if entry is None:
            entry = self.by_topic[topic_key] = (name, topic_id, [])
        read = self._read_of(name, request)
        read.key = key
        if session is not None and read.partition is not None:
            session.watch(key, read.partition)
        entry[2].append(read)
        return read

    def _read_of(self, name: str, request: Any) -> _PartitionRead:
        if name and self._is_denied(name):
            return _PartitionRead(request, None, ErrorCode.topic_authorization_failed)
        part = self.broker.partition(name, request.partition) if name else None
        if part is None:
            error = ErrorCode.unknown_topic_id if not name else self.broker.missing_partition_error(
                name, request.partition)
            return _PartitionRead(request, None, error)
        return _PartitionRead(request, part, _check_epoch(part, getattr(request, "current_leader_epoch", -1)))

    def _is_denied(self, name: str) -> bool:
        denied = self._denied.get(name)
        if denied is None:
            denied = self._denied[name] = bool(self.follower_denied or (
                not self.replica and self.ctx.denied(Operation.READ, ResourceType.TOPIC, name)))
        return denied


async def _results(ctx: RequestContext, fetch: _Fetch, session: FetchSession | None, incremental: bool,
                   committed: bool, replica: bool, quota: ByteRateQuota | None) -> list[TopicResult]:
    metrics = ctx.broker.metrics
    topics = []
    owed: set[SessionKey] = set()
    for name, topic_id, topic_reads in fetch.by_topic.values():
        result = TopicResult(name, topic_id=topic_id)
        for r in topic_reads:
            await ctx.turn()
            part = r.partition
            hw = lso = start = -1
            if part is not None and r.error == ErrorCode.none:
                hw, lso, start = part.high_watermark, part.last_stable_offset, part.log.log_start_offset
            if r.size and replica:
                metrics.replication_bytes_out.labels(name).inc(r.size)
                if r.throttled:
                    quota.record(r.size)
            elif r.size:
                metrics.bytes_out.labels(name).inc(r.size)
                metrics.messages_out.labels(name).inc(sum(s.record_count() for s in r.slices))
            elif r.error != ErrorCode.none:
                metrics.request_errors.labels("fetch", r.error.name).inc()
            if session is not None:
                cached = session.partitions.get(r.key)
                # Looked at again at the next fetch: a partition that returned records (the fetcher
                # may have more to read, or got a cut batch), one skipped for the response's size or
                # the throttle, an error, and a follower outside the ISR (asks to join at each fetch).
                if r.size or r.skipped or r.error != ErrorCode.none or (
                        replica and part is not None and fetch.replica_id not in part.isr):
                    session.dirty.add(r.key)
                if r.skipped:
                    owed.add(r.key)
                if cached is not None and not cached.must_respond(r.error.value, r.size, hw, lso, start) \
                        and incremental:
                    continue
            aborted = None
            if committed:
                # read_committed: the aborted transactions with records in what is returned, so the
                # client drops them (it reads up to the last stable offset, control batches included).
                aborted = [(t.producer_id, t.first_offset)
                           for t in part.log.aborted_transactions(r.request.fetch_offset, lso)] \
                    if part is not None and r.size else []
            result.partitions.append(PartitionResult(
                r.request.partition, r.error.value, hw, lso, start, r.slices, aborted=aborted,
            ))
        if result.partitions or not incremental:
            topics.append(result)
    if session is not None:
        session.owed = owed
    return topics


def _track_follower(broker, replica_id: int, reads: list[list[_PartitionRead]], throttling: bool,
                    session: FetchSession | None) -> None:
    """A follower's fetch offset is its log end offset: the leader's view of its progress."""
    for topic_reads in reads:
        for r in topic_reads:
            part = r.partition
            if part is None or r.error != ErrorCode.none or not part.is_leader:
                continue
            if replica_id not in part.replicas:
                r.error = ErrorCode.not_leader_or_follower
                continue
            if part.update_follower(replica_id, r.request.fetch_offset, getattr(r.request, "log_start_offset", -1),
                                    session):
                broker.replicas.maybe_expand(part, replica_id)
            r.throttled = throttling and broker.leader_throttled(part, replica_id)


def _has_errors(reads: list[list[_PartitionRead]]) -> bool:
    return any(r.error != ErrorCode.none for topic_reads in reads for r in topic_reads)


async def _wait_for_data(reads: list[list[_PartitionRead]], timeout: float) -> None:
    await wait_for_partitions({r.partition for topic_reads in reads for r in topic_reads if r.partition is not None},
                              timeout)


async def wait_for_partitions(parts: Iterable[Partition], timeout: float) -> None:
    """Long-polls until one of the partitions changes (an append, the high watermark, a release of share
    records) or `timeout` passes."""
    parts = set(parts)
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    for part in parts:
        part.add_waiter(fut)
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(fut, timeout)
    finally:
        for part in parts:
            part.remove_waiter(fut)
