"""Incremental fetch sessions (KIP-227): the leader's side.

A fetcher that asks for the same partitions every few hundred milliseconds — every follower, and
every consumer that supports sessions — sends them all once; after that a request names only the
partitions whose fetch position changed, and a response carries only the partitions that have
something new (records, a new high watermark, last stable offset or log start, an error). An idle
follower of thousands of partitions then exchanges a few dozen bytes per poll.

dm goes one step further than the protocol asks: the leader does not look at every partition of a
session on each fetch either. A session watches its partitions, and a partition marks itself in its
sessions when something a fetcher could see changes (an append, the high watermark, leadership, its
log start, its end); an incremental fetch reads only the marked partitions and the ones the request
names, and waits for a mark instead of registering with every partition. Its cost follows what
changed, not how many partitions the session holds (ADR 0029).

Sessions belong to the principal and replica id that created them; anyone else naming the id gets
FETCH_SESSION_ID_NOT_FOUND, like a session that never existed. The cache holds
`max.incremental.fetch.session.cache.slots` sessions; one unused for EVICTION_S may be replaced, and a
follower's new session may replace a consumer's (replication before consumption, as Kafka ranks them).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..replication.partition import Partition

INITIAL_EPOCH = 0  # a full fetch that opens a session
FINAL_EPOCH = -1  # a full fetch without a session (closes the one named)
EVICTION_S = 120.0  # Kafka's min.incremental.fetch.session.eviction.ms
EXPIRE_EVERY_S = 10.0
NOT_SENT = -2  # below every offset a response can carry (-1 is "unknown")

SessionKey = tuple[str, int]  # (topic name, or topic id for v13+ sessions; partition)


def next_epoch(epoch: int) -> int:
    """Epochs run 1..2^31-1 and wrap to 1 (0 and -1 mean open and close)."""
    return 1 if epoch >= 0x7FFFFFFF else epoch + 1


@dataclass(slots=True, eq=False)
class CachedPartition:
    """What the fetcher asked for last (named like a request's partition, so reads take either) and
    what it was last told."""

    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1
    last_fetched_epoch: int = -1
    sent_high_watermark: int = NOT_SENT
    sent_last_stable_offset: int = NOT_SENT
    sent_log_start_offset: int = NOT_SENT
    watched: Partition | None = None

    def update(self, req: Any) -> None:
        self.fetch_offset = req.fetch_offset
        self.partition_max_bytes = req.partition_max_bytes
        self.current_leader_epoch = getattr(req, "current_leader_epoch", -1)
        self.log_start_offset = getattr(req, "log_start_offset", -1)
        self.last_fetched_epoch = getattr(req, "last_fetched_epoch", -1)

    def must_respond(self, error: int, size: int, hw: int, lso: int, start: int) -> bool:
        """Whether an incremental response includes the partition; remembers what it says."""
        changed = (error != 0 or size > 0 or hw != self.sent_high_watermark
                   or lso != self.sent_last_stable_offset or start != self.sent_log_start_offset)
        self.sent_high_watermark, self.sent_last_stable_offset, self.sent_log_start_offset = hw, lso, start
        return changed


@dataclass(eq=False)
class FetchSession:
    id: int
    owner: tuple[str, int]  # (principal, replica id)
    uses_topic_ids: bool
    epoch: int = 1  # the epoch the next incremental request must carry
    last_used: float = field(default_factory=time.monotonic)
    partitions: dict[SessionKey, CachedPartition] = field(default_factory=dict)
    topic_ids: dict[str, bytes] = field(default_factory=dict)  # topic name or id -> the 16-byte id to answer
    dirty: set[SessionKey] = field(default_factory=set)
    # Skipped by the last answer (its size, a throttle, or the partitions-with-records limit): read first
    # in the next one, so a partition late in the order is not left out answer after answer.
    owed: set[SessionKey] = field(default_factory=set)
    closed: bool = False
    _waiter: asyncio.Future[None] | None = None

    @property
    def is_replica(self) -> bool:
        return self.owner[1] >= 0

    def upsert(self, topic: str, topic_id: bytes, req: Any) -> SessionKey:
        """A partition the request names: added, or its fetch position updated."""
        key = (topic, req.partition)
        cached = self.partitions.get(key)
        if cached is None:
            cached = self.partitions[key] = CachedPartition(req.partition, req.fetch_offset,
                                                            req.partition_max_bytes)
            self.topic_ids.setdefault(topic, topic_id)
        cached.update(req)
        return key

    def forget(self, key: SessionKey) -> None:
        cached = self.partitions.pop(key, None)
        self.dirty.discard(key)
        self.owed.discard(key)
        if cached is not None and cached.watched is not None:
            cached.watched.unwatch(self)
        # topic_ids keeps the topic's id: bounded by the topics ever named, and looking for the topic's
        # other partitions here would cost the whole session per forgotten partition.

    def watch(self, key: SessionKey, part: Partition) -> None:
        """The partition now serving `key` marks this session when it changes (a topic deleted and
        created again is a new Partition object)."""
        cached = self.partitions[key]
        if cached.watched is part:
            return
        if cached.watched is not None:
            cached.watched.unwatch(self)
        cached.watched = part
        part.watch(self, key)

    def mark(self, key: SessionKey) -> None:
        self.dirty.add(key)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def take_dirty(self) -> set[SessionKey]:
        taken, self.dirty = self.dirty, set()
        return taken

    async def wait(self, timeout: float) -> None:
        """Until a partition of the session changes, or `timeout` seconds."""
        if self.dirty or timeout <= 0:
            return
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(self._waiter, timeout)
        except TimeoutError:
            pass
        finally:
            self._waiter = None

    def close(self) -> None:
        self.closed = True
        for cached in self.partitions.values():
            if cached.watched is not None:
                cached.watched.unwatch(self)
                cached.watched = None
        self.partitions.clear()
        self.dirty.clear()
        self.owed.clear()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class FetchSessionCache:
    def __init__(self, slots: int, clock=time.monotonic) -> None:
        self.slots = slots
        self.clock = clock
        self.sessions: dict[int, FetchSession] = {}
        self._next_expiry = 0.0

    def __len__(self) -> int:
        return len(self.sessions)

    def partition_count(self) -> int:
        return sum(len(s.partitions) for s in self.sessions.values())

    def get(self, session_id: int, owner: tuple[str, int]) -> FetchSession | None:
        session = self.sessions.get(session_id)
        if session is not None and session.owner == owner:
            session.last_used = self.clock()
        self._expire()
        if session is None or session.owner != owner or session.closed:
            return None
        return session

    def remove(self, session_id: int, owner: tuple[str, int]) -> None:
        session = self.sessions.get(session_id)
        if session is not None and session.owner == owner:
            del self.sessions[session_id]
            session.close()

    def create(self, owner: tuple[str, int], uses_topic_ids: bool) -> FetchSession | None:
        """A new session, or None when the cache is full of sessions it may not replace (the
        fetcher then goes on with full fetches, as KIP-227 allows)."""
        self._expire()
        if self.slots <= 0:
            return None
        if len(self.sessions) >= self.slots and not self._evict_one(replica=owner[1] >= 0):
            return None
        session_id = random.randint(1, 0x7FFFFFFF)
        while session_id in self.sessions:
            session_id = random.randint(1, 0x7FFFFFFF)
        session = self.sessions[session_id] = FetchSession(session_id, owner, uses_topic_ids,
                                                           last_used=self.clock())
        return session

    def close_all(self) -> None:
        for session in self.sessions.values():
            session.close()
        self.sessions.clear()

    def _evict_one(self, replica: bool) -> bool:
        now = self.clock()
        candidates: Iterable[FetchSession] = [s for s in self.sessions.values()
                                              if now - s.last_used >= EVICTION_S or (replica and not s.is_replica)]
        victim = min(candidates, key=lambda s: s.last_used, default=None)
        if victim is None:
            return False
        del self.sessions[victim.id]
        victim.close()
        return True

    def _expire(self) -> None:
        """Sessions nobody used for EVICTION_S go (their fetchers left): each one watches its partitions."""
        now = self.clock()
        if now < self._next_expiry:
            return
        self._next_expiry = now + EXPIRE_EVERY_S
        for session in [s for s in self.sessions.values() if now - s.last_used >= EVICTION_S]:
            del self.sessions[session.id]
            session.close()
