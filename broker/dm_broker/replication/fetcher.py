"""Follower fetching: one fetcher per leader broker, many partitions per Fetch request.

Before a partition is fetched in a new leader epoch it is truncated to the point where its log and
the leader's agree, found with OffsetForLeaderEpoch (Kafka's KIP-101/279 protocol): anything past
that point was never committed and would otherwise make the replicas diverge.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ..log import dir_failure
from ..log.leader_epochs import UNDEFINED_EPOCH
from ..log.records import BatchHeader
from ..protocol.build import make, nested
from ..protocol.client import KafkaConnection
from ..protocol.codec import request_class
from ..protocol.fetch_decoder import VERSION as FETCH_VERSION
from ..protocol.fetch_decoder import decode_fetch_response
from ..protocol.fetch_encoder import PartitionResult
from ..steps import PARTITIONS_PER_STEP
from ..tasks import cancelling, stop_tasks
from .fetch_session_client import FetchSessionClient, PartitionFetch
from .partition import EPOCH_WRITER_THREADS, EPOCH_WRITERS, FOLLOWER, Partition

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger(__name__)

EPOCH_VERSION = 4
MAX_WAIT_MS = 500
PARTITION_MAX_BYTES = 8 << 20
THROTTLED_MIN_BYTES = 64 << 10  # a throttled partition still asks for whole batches
BACKOFF_S = 0.2
REFRESH_S = 5.0
TRUNCATION_BATCH = 500  # partitions per OffsetForLeaderEpoch request
SESSION_BATCH = 500  # partitions named per session fetch request at most (FetchSessionClient.limit)


class EpochWriteError(Exception):
    """This broker could not write fetched leader epochs to its own epoch files."""


def _run_writes(writes: list[Callable[[], None]]) -> list[OSError | None]:
    """Runs each write in turn (in a worker thread); each one's error, or None."""
    errors: list[OSError | None] = []
    for write in writes:
        try:
            write()
            errors.append(None)
        except OSError as exc:
            errors.append(exc)
    return errors


class ReplicaFetcher:
    def __init__(self, broker: Broker, leader_id: int) -> None:
        self.broker = broker
        self.leader_id = leader_id
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.needs_truncation: set[tuple[str, int]] = set()
        self._task: asyncio.Task[None] | None = None
        self._conn: KafkaConnection | None = None
        self._changed = asyncio.Event()
        self.session = FetchSessionClient(
            enabled=broker.config["max.incremental.fetch.session.cache.slots"] > 0, limit=SESSION_BATCH)
        # What the next request wants of each partition, kept up to date for the partitions touched since
        # the last fetch (appended, truncated, added, removed) and in full every REFRESH_S (a local
        # retention moves a log start without touching the fetcher): an idle fetch costs what changed.
        self._wanted: dict[tuple[str, int], PartitionFetch] = {}
        self._touched: set[tuple[str, int]] = set()
        self._refresh_at = 0.0

    def add(self, part: Partition) -> None:
        key = (part.topic, part.index)
        self.partitions[key] = part
        self.needs_truncation.add(key)
        self._touched.add(key)
        self._changed.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"fetcher-{self.leader_id}")

    def remove(self, part: Partition) -> None:
        key = (part.topic, part.index)
        self.partitions.pop(key, None)
        self.needs_truncation.discard(key)
        self._touched.add(key)

    async def close(self) -> None:
        await stop_tasks(self._task)
        await self._disconnect()

    async def _disconnect(self) -> None:
        self.session.reset()  # the next connection opens a new session with a full fetch
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
            self._conn = None

    async def _connection(self) -> KafkaConnection:
        if self._conn is None:
            endpoint = self.broker.endpoint(self.leader_id)
            if endpoint is None:
                raise ConnectionError(f"leader {self.leader_id} has no known endpoint")
            self._conn = await KafkaConnection.open(endpoint.host, endpoint.port,
                                                    client_id=f"dm-replica-{self.broker.node_id}",
                                                    security=self.broker.security.client)
        return self._conn

    async def _run(self) -> None:
        while self.partitions:
            try:
                conn = await self._connection()
                if self.needs_truncation:
                    await self._truncate(conn)
                await self._fetch_once(conn)
                self.broker.trust(self.leader_id)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if cancelling():
                    raise asyncio.CancelledError from exc
                dir_failure.check(exc)
                log.debug("fetcher for leader %d: %s", self.leader_id, exc)
                if isinstance(exc, (ConnectionError, OSError, asyncio.IncompleteReadError)):
                    self.broker.suspect(self.leader_id)
                await self._disconnect()
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), BACKOFF_S)

    async def _truncate(self, conn: KafkaConnection) -> None:
        # At most TRUNCATION_BATCH partitions a request: the leader answers each request in one piece on its
        # loop, and a broker following 3,000 new partitions held its leader's loop for 0.4 s with one.
        keys = [k for k in self.needs_truncation if k in self.partitions]
        for first in range(0, len(keys), TRUNCATION_BATCH):
            await self._truncate_some(conn, keys[first:first + TRUNCATION_BATCH])

    async def _truncate_some(self, conn: KafkaConnection, keys: list[tuple[str, int]]) -> None:
        cls = request_class(23, EPOCH_VERSION)
        topic_cls = nested(cls, "OffsetForLeaderTopic")
        part_cls = nested(cls, "OffsetForLeaderPartition")
        by_topic: dict[str, list[Partition]] = {}
        for key in keys:
            if (part := self.partitions.get(key)) is not None:  # it may have gone while a batch before was out
                by_topic.setdefault(key[0], []).append(part)
        if not by_topic:
            return
        req = make(cls, replica_id=self.broker.node_id, topics=tuple(
            topic_cls(topic=topic, partitions=tuple(part_cls(
                partition=p.index, current_leader_epoch=p.leader_epoch,
                leader_epoch=max(p.log.leader_epochs.latest_epoch, 0)) for p in parts))
            for topic, parts in by_topic.items()))
        resp = await conn.request(req)
        for topic in resp.topics:
            for r in topic.partitions:
                key = (topic.topic, r.partition)
                part = self.partitions.get(key)
                if part is None:
                    continue
                if r.error_code != ErrorCode.none:
                    log.debug("%s-%d: OffsetForLeaderEpoch from %d: %s", *key, self.leader_id, r.error_code.name)
                    continue
                plog = part.log
                if r.leader_epoch == UNDEFINED_EPOCH or r.end_offset < 0:
                    target = min(part.hw, plog.log_end_offset)
                else:
                    _, mine = plog.leader_epochs.end_offset_for(r.leader_epoch, plog.log_end_offset)
                    target = min(r.end_offset, mine if mine >= 0 else plog.log_end_offset)
                if target < plog.log_end_offset:
                    log.warning("%s-%d: truncating from %d to %d to match leader %d (epoch %d)", *key,
                                plog.log_end_offset, target, self.leader_id, r.leader_epoch)
                    plog.truncate_to(target)
                self.needs_truncation.discard(key)
                self._touched.add(key)

    def _wants(self, part: Partition, throttled: set[tuple[str, int]], allowance: int) -> PartitionFetch:
        plog = part.log
        return PartitionFetch(fetch_offset=plog.log_end_offset, current_leader_epoch=part.leader_epoch,
                              last_fetched_epoch=plog.leader_epochs.latest_epoch,
                              log_start_offset=plog.log_start_offset,
                              partition_max_bytes=self._max_bytes(part, throttled, allowance))

    async def _all_wanted(self, ready: list[Partition], throttled: set[tuple[str, int]], allowance: int
                          ) -> dict[tuple[str, int], PartitionFetch]:
        """What the next request wants of every ready partition, PARTITIONS_PER_STEP partitions between two turns of
        the loop (a follower of thousands of partitions; ADR 0039). What is touched meanwhile (appended,
        removed, truncated) is looked at again once all are done."""
        self._touched = set()
        wanted: dict[tuple[str, int], PartitionFetch] = {}
        for first in range(0, len(ready), PARTITIONS_PER_STEP):
            if first:
                await asyncio.sleep(0)
            for part in ready[first:first + PARTITIONS_PER_STEP]:
                wanted[(part.topic, part.index)] = self._wants(part, throttled, allowance)
        self._update_wanted(wanted, self._touched, throttled, allowance)
        self._touched = set()
        return wanted

    def _update_wanted(self, wanted: dict[tuple[str, int], PartitionFetch], keys: set[tuple[str, int]],
                       throttled: set[tuple[str, int]], allowance: int) -> None:
        """`wanted` brought up to date for `keys`: a partition no longer ready to fetch leaves it."""
        for key in keys:
            part = self._ready(key)
            if part is None:
                wanted.pop(key, None)
            else:
                wanted[key] = self._wants(part, throttled, allowance)

    def _ready(self, key: tuple[str, int]) -> Partition | None:
        part = self.partitions.get(key)
        return part if part is not None and key not in self.needs_truncation and part.role == FOLLOWER else None

    async def _fetch_once(self, conn: KafkaConnection) -> None:
        quota = self.broker.follower_quota
        now = time.monotonic()
        changed: set[tuple[str, int]] | None
        throttled: set[tuple[str, int]] = set()
        if quota.unlimited() and now < self._refresh_at and self.session.enabled:
            self._update_wanted(self._wanted, self._touched, set(), 0)
            changed, self._touched = self._touched, set()
        else:  # in full: now and then, and always under a replication throttle (its shares move)
            ready = [p for k, p in self.partitions.items() if self._ready(k) is not None]
            allowance = quota.available()
            throttled = set() if quota.unlimited() else {
                (p.topic, p.index) for p in ready if self.broker.follower_throttled(p)}
            if allowance <= 0 and throttled:  # over follower.replication.throttled.rate: in-sync partitions only
                ready = [p for p in ready if (p.topic, p.index) not in throttled]
                if not ready:
                    await asyncio.sleep(min(quota.seconds_until_available(), MAX_WAIT_MS / 1000))
                    return
            self._wanted = await self._all_wanted(ready, throttled, allowance)
            self._refresh_at = now + REFRESH_S
            changed = None
        if not self._wanted:
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), BACKOFF_S)
            return
        plan = self.session.plan(self._wanted, changed)
        cls = request_class(1, FETCH_VERSION)
        topic_cls = nested(cls, "FetchTopic")
        part_cls = nested(cls, "FetchPartition")
        forgotten_cls = nested(cls, "ForgottenTopic")
        by_topic: dict[str, list] = {}
        for (topic, index), f in plan.partitions.items():
            by_topic.setdefault(topic, []).append(make(
                part_cls, partition=index, current_leader_epoch=f.current_leader_epoch, fetch_offset=f.fetch_offset,
                last_fetched_epoch=f.last_fetched_epoch, log_start_offset=f.log_start_offset,
                partition_max_bytes=f.partition_max_bytes))
        forgotten: dict[str, list[int]] = {}
        for topic, index in plan.forgotten:
            forgotten.setdefault(topic, []).append(index)
        # Partitions left for the next request: it comes at once, not after a long poll on these.
        max_wait_ms = 0 if self.session.backlog else MAX_WAIT_MS
        req = make(
            cls, replica_id=self.broker.node_id, max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1,
            max_bytes=64 << 20, isolation_level=0, session_id=plan.session_id, session_epoch=plan.epoch,
            topics=tuple(topic_cls(topic=topic, partitions=tuple(parts)) for topic, parts in by_topic.items()),
            forgotten_topics_data=tuple(forgotten_cls(topic=topic, partitions=tuple(indexes))
                                        for topic, indexes in forgotten.items()),
            rack_id="",
        )
        frame = await conn.request_frame(req, timeout=MAX_WAIT_MS / 1000 + 30)
        _, error, session_id, partitions = decode_fetch_response(frame)
        if not self.session.answered(error, session_id):
            log.debug("fetch session with leader %d lost (%s): fetching in full", self.leader_id,
                      ErrorCode(error).name)
            return
        if error != ErrorCode.none:
            raise ConnectionError(f"fetch from leader {self.leader_id} failed: {ErrorCode(error).name}")
        answered = [(key, part, r) for topic, r in partitions
                    if (part := self.partitions.get(key := (topic, r.index))) is not None and part.role == FOLLOWER]
        unseen = {key: part.log.unseen_batches(r.records) for key, part, r in answered
                  if r.records and r.error_code == ErrorCode.none}
        failed = await self._write_new_epochs([(key, part, unseen[key]) for key, part, _ in answered if key in unseen])
        for key, part, r in answered:
            if key in failed or self.partitions.get(key) is not part or part.role != FOLLOWER:
                continue  # its epoch file could not be written, or it changed hands while that was done
            if key in throttled and r.records:
                quota.record(len(r.records))
            self._touched.add(key)
            self._apply(key, part, r, unseen.get(key))
        if failed:  # as any failed fetch (a new connection, a full fetch that asks for these again), but
            # this broker's disk failed, not the leader: it is not suspected
            raise EpochWriteError(f"leader epochs of {len(failed)} partitions could not be written, "
                                  f"e.g. {min(failed)}")

    async def _write_new_epochs(self, fetched: list[tuple[tuple[str, int], Partition, list[tuple[int, BatchHeader]]]]
                                ) -> set[tuple[str, int]]:
        """Writes the leader epochs first seen in the fetched batches (each partition's unseen_batches) to
        their partitions' epoch files, in the epoch writers' threads, before any of their records is appended
        (a log's file never lacks an epoch it has records of; ADR 0039). Returns the partitions whose write
        failed: their epochs are taken out again and their records not appended."""
        jobs = []
        for key, part, located in fetched:
            epochs = part.log.new_epochs(located)
            if epochs and (job := part.log.leader_epochs.assign_fetched(epochs)) is not None:
                jobs.append((key, *job))
        if not jobs:
            return set()
        failed: set[tuple[str, int]] = set()

        def undo_failed(share: list, future: asyncio.Future[list[OSError | None]]) -> None:
            # a done callback: the epochs come out even if this fetch was cancelled meanwhile
            if future.cancelled() or future.exception() is not None:
                return
            for (key, _, undo), error in zip(share, future.result(), strict=True):
                if error is not None:
                    dir_failure.check(error)
                    undo()
                    failed.add(key)
                    log.error("%s-%d: cannot write its leader epochs: %s", *key, error)

        loop = asyncio.get_running_loop()
        futures = []
        for share in (jobs[i::EPOCH_WRITER_THREADS] for i in range(EPOCH_WRITER_THREADS)):  # one per thread
            if share:
                future = loop.run_in_executor(EPOCH_WRITERS, _run_writes, [write for _, write, _ in share])
                future.add_done_callback(functools.partial(undo_failed, share))
                futures.append(future)
        await asyncio.gather(*futures)
        return failed

    @staticmethod
    def _max_bytes(part: Partition, throttled: set[tuple[str, int]], allowance: int) -> int:
        if (part.topic, part.index) not in throttled:
            return PARTITION_MAX_BYTES
        return max(min(allowance, PARTITION_MAX_BYTES), THROTTLED_MIN_BYTES)

    def _apply(self, key: tuple[str, int], part: Partition, r: PartitionResult,
               located: list[tuple[int, BatchHeader]] | None) -> None:
        error = ErrorCode(r.error_code)
        plog = part.log
        if error == ErrorCode.none:
            if r.records:
                plog.append_as_follower(r.records, located)
                if plog.flush_due():
                    asyncio.get_running_loop().create_task(plog.flush())
            part.set_follower_hw(r.high_watermark)
            if r.log_start_offset > plog.log_start_offset:
                plog.advance_start(r.log_start_offset)  # the leader's DeleteRecords reaches its followers
        elif error == ErrorCode.offset_out_of_range:
            if plog.log_end_offset < r.log_start_offset or r.log_start_offset < 0:
                log.warning("%s-%d: behind the leader's log start; restarting the replica at %d", *key,
                            r.log_start_offset)
                plog.reset_to(max(r.log_start_offset, 0))
            else:
                self.needs_truncation.add(key)
        elif error in (ErrorCode.fenced_leader_epoch, ErrorCode.not_leader_or_follower,
                       ErrorCode.unknown_leader_epoch, ErrorCode.unknown_topic_or_partition):
            pass  # metadata will tell us the new leader; keep trying meanwhile
        else:
            log.warning("%s-%d: fetch from leader %d failed: %s", *key, self.leader_id, error.name)
