"""A partition replica hosted by this broker: its log plus leadership and replication state.

As leader it appends, tracks every follower's log end offset (reported by its fetches), advances
the high watermark to what the whole ISR has, and completes acks=all produce requests waiting for
that (the purgatory). As follower it only appends what the leader sends and takes the leader's
high watermark. Consumers never read past the high watermark, and read_committed consumers not
past the last stable offset: the first offset of the oldest transaction still open here, or of one
whose marker the ISR does not have yet.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ..errors import KafkaError
from ..log import dir_failure
from ..log.partition_log import AppendResult, PartitionLog
from ..log.records import BatchHeader, build_marker_batch, validate_batches

if TYPE_CHECKING:
    from ..protocol.fetch_sessions import FetchSession

LEADER = "leader"
FOLLOWER = "follower"
OFFLINE = "offline"

log = logging.getLogger(__name__)
# Writes a new leader's epoch file (two fsyncs) off the event loop (ADR 0039). Threads of their own, so
# a broker taking over a thousand partitions does not queue them ahead of flushes and other jobs.
EPOCH_WRITER_THREADS = 2
EPOCH_WRITERS = ThreadPoolExecutor(max_workers=EPOCH_WRITER_THREADS, thread_name_prefix="dm-leader-epoch")


class NotEnoughReplicasError(Exception):
    """The ISR is smaller than min.insync.replicas: before the append (NOT_ENOUGH_REPLICAS, nothing
    written) or once the high watermark passed it (NOT_ENOUGH_REPLICAS_AFTER_APPEND: written, but on
    fewer disks than the topic asks for)."""

    def __init__(self, message: str, after_append: bool = False) -> None:
        super().__init__(message)
        self.after_append = after_append


class NotLeaderError(Exception):
    pass


@dataclass
class FollowerState:
    log_end_offset: int = -1  # unknown until the follower's first fetch in this leader epoch
    last_caught_up: float = field(default_factory=time.monotonic)
    log_start_offset: int = -1  # as its last fetch reported it (DeleteRecords waits for the lowest)
    # The leader's log end offset when this follower last fetched, and when: a fetch that reaches it
    # shows the follower was caught up at that earlier fetch (Kafka's lastFetchLeaderLogEndOffset).
    last_fetch_leader_leo: int = -1
    last_fetch_at: float = 0.0
    # The incremental fetch session it fetches this partition in: each fetch of the session asks for
    # the partition again at its cached offset without naming it, so "caught up" is judged from the
    # session's last use instead of a per-partition update at every fetch.
    session: FetchSession | None = None


@dataclass(eq=False)
class Partition:
    topic: str
    index: int
    log: PartitionLog
    node_id: int
    leader_id: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    role: str = OFFLINE
    hw: int = 0
    followers: dict[int, FollowerState] = field(default_factory=dict)
    pending_isr: list[int] | None = None  # an ISR change sent to the controller, not yet committed
    adding_replicas: list[int] = field(default_factory=list)  # a reassignment's new replicas (throttled)
    topic_id: str = ""  # the topic this log belongs to: a topic deleted and created again is another one
    closed: bool = False
    # told of each ISR change while this broker leads: (replicas that left, replicas that joined)
    on_isr_change: Callable[[set[int], set[int]], None] | None = None
    _waiters: set[asyncio.Future[None]] = field(default_factory=set)
    _sessions: dict[FetchSession, tuple[str, int]] = field(default_factory=dict)  # incremental fetch sessions
    _purgatory: list[tuple[int, int, asyncio.Future[None]]] = field(default_factory=list)
    _seq: int = 0
    # the write of this leader epoch to the epoch file, while it is under way (or failed)
    _epoch_write: asyncio.Future[None] | None = None

    @property
    def is_leader(self) -> bool:
        return self.role == LEADER and not self.closed

    @property
    def high_watermark(self) -> int:
        return min(self.hw, self.log.log_end_offset)

    @property
    def epoch_start_offset(self) -> int:
        """Where the latest leader epoch in the log's epoch cache began; for a leader, its own epoch, which
        starts at its log end when it was elected (0 for a log that knows no epoch)."""
        entries = self.log.leader_epochs.entries
        return entries[-1][1] if entries else 0

    @property
    def high_watermark_lags(self) -> bool:
        """A new leader's high watermark still below the start of its epoch (KIP-207): it has only what the
        old leader told it as a follower, which trails what that leader acknowledged, until the followers
        in the ISR fetch from it. Offsets from it would move back, so clients are told to retry."""
        return self.is_leader and self.high_watermark < self.epoch_start_offset

    @property
    def last_stable_offset(self) -> int:
        hw = self.high_watermark
        unstable = [o for o in (self.log.producers.first_unstable_offset(),) if o is not None]
        pending = self.log.unreplicated_txns
        while pending and pending[0].last_offset < hw:
            pending.popleft()  # its marker is replicated: the transaction is stable
        unstable += [t.first_offset for t in pending]
        return min([hw, *unstable])

    def marker_count(self, producer_id: int) -> int:
        """How many markers were written here for the producer (a verification is valid only until
        the next one: KIP-890's verification guard)."""
        return self.log.marker_counts.get(producer_id, 0)

    async def append_marker(self, producer_id: int, producer_epoch: int, committed: bool,
                            coordinator_epoch: int, timestamp_ms: int) -> AppendResult:
        """Ends the producer's transaction here with a COMMIT or ABORT marker (as leader). Raises the
        producer-state errors: an older producer epoch, an older coordinator."""
        data = bytearray(build_marker_batch(producer_id, producer_epoch, committed, coordinator_epoch, timestamp_ms))
        return await self.append_as_leader(data, validate_batches(data, 1 << 20), check=lambda: (
            self.log.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)))

    def close(self) -> None:
        """The partition is gone from this broker (topic deleted or reassigned)."""
        self.closed = True
        self._fail_purgatory()
        self._wake_fetchers()

    # -- roles -----------------------------------------------------------------------------

    def become_leader(self, leader_epoch: int, partition_epoch: int, replicas: list[int], isr: list[int]) -> None:
        new_epoch = leader_epoch != self.leader_epoch or self.role != LEADER
        if self.role == LEADER:  # still leading: the controller changed the ISR (it fenced a follower)
            self._note_isr_change(isr)
        self.role = LEADER
        self.leader_id = self.node_id
        self.replicas = list(replicas)
        self.isr = list(isr)
        self.partition_epoch = partition_epoch
        self.pending_isr = None
        if new_epoch:
            self.leader_epoch = leader_epoch
            # The new epoch starts at our log end: followers truncate anything past it that they
            # got from an older leader (OffsetForLeaderEpoch). On disk before any record of it
            # (append_as_leader waits), written in a worker thread, not on the loop (ADR 0039).
            job = self.log.leader_epochs.assign_later(leader_epoch, self.log.log_end_offset)
            if job is not None:
                self._epoch_write = self._start_epoch_write(job)
            now = time.monotonic()
            self.followers = {r: FollowerState(last_caught_up=now) for r in replicas if r != self.node_id}
        self.maybe_advance_hw()
        self._wake_fetchers()  # a fetcher told NOT_LEADER or FENCED may read here now

    def become_follower(self, leader_id: int, leader_epoch: int, partition_epoch: int, replicas: list[int],
                        isr: list[int]) -> None:
        self.role = FOLLOWER if leader_id >= 0 else OFFLINE
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = list(replicas)
        self.isr = list(isr)
        self.followers = {}
        self.pending_isr = None
        self._fail_purgatory()
        self._wake_fetchers()  # its fetchers hear NOT_LEADER now, not at their max wait

    def _note_isr_change(self, isr: list[int]) -> None:
        left, joined = set(self.isr) - set(isr), set(isr) - set(self.isr)
        if (left or joined) and self.on_isr_change is not None:
            self.on_isr_change(left, joined)

    def set_replicas(self, replicas: list[int]) -> None:
        """The assignment changed under the same leader (a reassignment adds or drops replicas):
        the leader tracks the new followers' fetches so they can join the ISR."""
        self.replicas = list(replicas)
        if self.role != LEADER:
            return
        now = time.monotonic()
        for r in replicas:
            if r != self.node_id and r not in self.followers:
                self.followers[r] = FollowerState(last_caught_up=now)
        for r in [r for r in self.followers if r not in replicas]:
            del self.followers[r]
        self._recheck_outside_isr()

    def update_isr(self, isr: list[int], partition_epoch: int) -> None:
        if partition_epoch < self.partition_epoch:
            return
        if self.role == LEADER:
            self._note_isr_change(isr)
        self.isr = list(isr)
        self.partition_epoch = partition_epoch
        self.pending_isr = None
        self.maybe_advance_hw()
        self._recheck_outside_isr()

    def _recheck_outside_isr(self) -> None:
        """A follower outside the ISR asks to join at each fetch that reads this partition. In an
        incremental session an idle, caught-up follower's fetches name nothing, so after an ISR
        shrink (the controller's, or ours committed after the follower had caught up) or a new replica
        the leader must read the partition for its sessions again: mark it in them."""
        if self.role == LEADER and self._sessions and any(r not in self.isr for r in self.followers):
            for session, key in self._sessions.items():
                session.mark(key)

    # -- leader: appends and the high watermark ----------------------------------------------

    def _start_epoch_write(self, job: Callable[[], None]) -> asyncio.Future[None] | None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on a loop (tools, tests): written right away
            job()
            return None
        future = loop.run_in_executor(EPOCH_WRITERS, job)
        future.add_done_callback(self._epoch_written)
        return future

    def _epoch_written(self, future: asyncio.Future[None]) -> None:
        if not future.cancelled() and future.exception() is not None:
            dir_failure.check(future.exception(), self.log.log_dir)
            log.error("%s-%d: cannot write leader epoch %d: %s", self.topic, self.index, self.leader_epoch,
                      future.exception())

    async def _epoch_on_disk(self) -> None:
        """Returns once the current leader epoch is in the epoch file: a record of an epoch the file does not
        have could, after a crash, be kept by a returning replica that should truncate it."""
        while (pending := self._epoch_write) is not None:
            try:
                await asyncio.shield(pending)
            except OSError as exc:
                raise KafkaError(ErrorCode.kafka_storage_error, f"{self.topic}-{self.index}: the leader epoch "
                                                                f"could not be written: {exc}") from None
            if self._epoch_write is pending:
                self._epoch_write = None

    async def append_as_leader(self, data: bytes | bytearray, headers: list[BatchHeader],
                               check: Callable[[], None] | None = None) -> AppendResult:
        """Appends validated batches. Raises the producer-state errors; returns the original
        offsets for a retried batch instead of appending it twice. `check` runs right before the append
        (nothing can change between them), to refuse it by raising."""
        if self._epoch_write is not None:  # only after a takeover: no coroutine per append otherwise
            await self._epoch_on_disk()
        if not self.is_leader:
            raise NotLeaderError(f"broker {self.node_id} does not lead {self.topic}-{self.index}")
        if check is not None:
            check()
        first = headers[0]
        cached = self.log.check_duplicate(first)
        if cached is not None:
            return AppendResult(cached.first_offset, cached.last_offset, -1, duplicate=True)
        for header in headers[1:]:
            self.log.check_duplicate(header)
        result = self.log.append(data, headers, self.leader_epoch)
        self._wake_fetchers()
        self.maybe_advance_hw()
        if self.log.flush_due():
            await self.log.flush()
        return result

    async def append_internal(self, data: bytearray, timeout: float = 30) -> AppendResult:
        """Appends a batch the broker built itself (group metadata, offsets, transaction state) as
        acks=all: refused when the ISR is below min.insync.replicas, and confirmed only once the
        high watermark passed it with the ISR still that large."""
        self.check_min_isr()
        result = await self.append_as_leader(data, validate_batches(data, 1 << 30))
        await self.wait_committed(result.last_offset + 1, timeout)
        return result

    def check_min_isr(self) -> None:
        """Before an acks=all append: NotEnoughReplicasError when the ISR is below min.insync.replicas."""
        required = self.log.settings["min.insync.replicas"]
        if len(self.isr) < required:
            raise NotEnoughReplicasError(f"{self.topic}-{self.index}: ISR {sorted(self.isr)} is smaller than "
                                         f"min.insync.replicas={required}")

    async def wait_committed(self, offset: int, timeout: float) -> None:
        """acks=all: waits until the high watermark reaches `offset`; then the ISR that advanced it must
        still be min.insync.replicas large (else NotEnoughReplicasError after the append, as Kafka's
        NOT_ENOUGH_REPLICAS_AFTER_APPEND). Raises TimeoutError or NotLeaderError as wait_for_hw."""
        await self.wait_for_hw(offset, timeout)
        required = self.log.settings["min.insync.replicas"]
        if len(self.isr) < required:
            raise NotEnoughReplicasError(f"{self.topic}-{self.index}: written, but the ISR {sorted(self.isr)} "
                                         f"shrank below min.insync.replicas={required}", after_append=True)

    def update_follower(self, replica: int, fetch_offset: int, log_start_offset: int = -1,
                        session: FetchSession | None = None) -> bool:
        """A follower fetched from `fetch_offset`, so it has everything before it. Returns True
        when the follower caught up and is not in the ISR (the caller asks to expand it)."""
        state = self.followers.get(replica)
        if state is None:
            return False
        now = time.monotonic()
        state.log_end_offset = fetch_offset
        state.session = session
        if log_start_offset >= 0:
            state.log_start_offset = log_start_offset
        # Caught up now when it fetches from our log end; else caught up as of its previous fetch when it
        # has everything we had then. Kafka's rule: under a steady stream of appends a follower's fetch
        # offset trails the log end by whatever came in since its last fetch, so "at the log end" alone
        # would shrink the ISR of a healthy follower of a busy partition after replica.lag.time.max.ms.
        leader_leo = self.log.log_end_offset
        if fetch_offset >= leader_leo:
            state.last_caught_up = now
        elif fetch_offset >= state.last_fetch_leader_leo:
            state.last_caught_up = max(state.last_caught_up, state.last_fetch_at)
        state.last_fetch_leader_leo = leader_leo
        state.last_fetch_at = now
        self.maybe_advance_hw()
        return (replica not in self.isr and self.pending_isr is None and fetch_offset >= self.high_watermark
                and fetch_offset >= self.epoch_start_offset)

    def maybe_advance_hw(self) -> None:
        if self.role != LEADER:
            return
        # An ISR member being added counts already (Kafka's "maximal ISR"); one being removed
        # counts until the controller committed the removal.
        members = set(self.isr) | set(self.pending_isr or ())
        new_hw = self.log.log_end_offset
        for replica in members:
            if replica == self.node_id:
                continue
            state = self.followers.get(replica)
            if state is None or state.log_end_offset < 0:
                return  # not heard from it in this epoch yet
            new_hw = min(new_hw, state.log_end_offset)
        if new_hw > self.hw:
            self.hw = new_hw
            self._complete_purgatory()
            self._wake_fetchers()

    def low_watermark(self, live: set[int]) -> int:
        """The lowest log start offset over this leader and its followers on `live` brokers (Kafka's
        low watermark): records below it are gone from every replica that could lead next. A live
        follower not heard from yet holds it at 0."""
        starts = [self.log.log_start_offset]
        for replica, state in self.followers.items():
            if replica in live:
                starts.append(max(state.log_start_offset, 0))
        return min(starts)

    def set_follower_hw(self, leader_hw: int) -> None:
        self.hw = min(leader_hw, self.log.log_end_offset)

    async def wait_for_hw(self, offset: int, timeout: float) -> None:
        """Waits until the high watermark reaches `offset` (acks=all). Raises TimeoutError, or
        NotLeaderError when leadership is lost meanwhile."""
        if self.high_watermark >= offset:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._seq += 1
        heapq.heappush(self._purgatory, (offset, self._seq, fut))
        await asyncio.wait_for(fut, timeout)

    def _complete_purgatory(self) -> None:
        while self._purgatory and self._purgatory[0][0] <= self.high_watermark:
            _, _, fut = heapq.heappop(self._purgatory)
            if not fut.done():
                fut.set_result(None)

    def _fail_purgatory(self) -> None:
        while self._purgatory:
            _, _, fut = heapq.heappop(self._purgatory)
            if not fut.done():
                fut.set_exception(NotLeaderError(f"{self.topic}-{self.index} lost leadership"))

    def stale_followers(self, max_lag_s: float) -> list[int]:
        now = time.monotonic()
        stale = []
        for replica in self.isr:
            state = self.followers.get(replica)
            if replica == self.node_id or state is None or now - state.last_caught_up <= max_lag_s:
                continue
            if self._caught_up_in_session(state, now, max_lag_s):
                state.last_caught_up = now
                continue
            stale.append(replica)
        return stale

    def lag_report(self, replicas: list[int]) -> str:
        """What a shrink is based on, for its log line: per follower, how long since it was caught up and since
        it last fetched this partition, and how far its fetch offset trails the log end."""
        now = time.monotonic()
        parts = []
        for replica in replicas:
            state = self.followers.get(replica)
            if state is None:
                continue
            fetched = f"{now - state.last_fetch_at:.1f}s ago" if state.last_fetch_at else "never"
            parts.append(f"{replica}: caught up {now - state.last_caught_up:.1f}s ago, last fetch {fetched} at "
                         f"offset {state.log_end_offset} of {self.log.log_end_offset}")
        return "; ".join(parts)

    def _caught_up_in_session(self, state: FollowerState, now: float, max_lag_s: float) -> bool:
        """A follower whose session still holds this partition, used within the lag limit, at our log
        end: its last fetch asked for this partition at the log end, so it was caught up then."""
        session = state.session
        return (session is not None and not session.closed and session in self._sessions
                and now - session.last_used <= max_lag_s and state.log_end_offset >= self.log.log_end_offset)

    # -- fetch long-poll ---------------------------------------------------------------------

    def watch(self, session: FetchSession, key: tuple[str, int]) -> None:
        self._sessions[session] = key

    def unwatch(self, session: FetchSession) -> None:
        self._sessions.pop(session, None)

    def notify_changed(self) -> None:
        """Something a fetcher sees changed outside an append or the high watermark (the log start)."""
        self._wake_fetchers()

    def add_waiter(self, fut: asyncio.Future[None]) -> None:
        self._waiters.add(fut)

    def remove_waiter(self, fut: asyncio.Future[None]) -> None:
        self._waiters.discard(fut)

    def _wake_fetchers(self) -> None:
        if self._sessions:
            for session, key in self._sessions.items():
                session.mark(key)
        if self._waiters:
            for fut in self._waiters:
                if not fut.done():
                    fut.set_result(None)
            self._waiters.clear()
