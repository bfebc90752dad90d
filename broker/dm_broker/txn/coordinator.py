"""The transaction coordinator: for every transactional id whose `__transaction_state` partition this
broker leads, its state (txn/metadata.py), written to that partition (acks=all) before anyone is
answered, and the markers that end its transactions.

A transition is written while the id is marked pending: a concurrent request for the same id is
answered CONCURRENT_TRANSACTIONS and retried by the client. Once a Prepare* state is written the client
is answered; the markers are then written to every partition of the transaction (markers.py), and the
Complete* state after them. A broker that becomes leader of a `__transaction_state` partition loads it
and finishes whatever was prepared there; transactions open longer than their timeout are aborted with
a bumped epoch; ids idle longer than `transactional.id.expiration.ms` are removed (a tombstone)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode as E

from ..binary import FormatError
from ..log.records import build_batch, decode_records
from ..partitioners import murmur2_partition
from ..replication.partition import NotEnoughReplicasError
from ..tasks import stop_tasks
from . import metadata as txn
from .markers import Outcome
from .metadata import TopicPartition, TxnError, TxnMetadata
from .records import TxnState, decode_key, decode_value, encode_key, encode_value

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger(__name__)
TXN_TOPIC = "__transaction_state"
MarkerWriter = Callable[[TxnMetadata, int, set[TopicPartition], dict[TopicPartition, str]], Awaitable[Outcome]]


SETTLE_WAIT_S = 0.5  # longest a request waits for the previous transaction's markers (then: retry later)
UNFINISHED_WARN_S = 10.0  # a transaction whose markers are not all written by then is logged, and again every
UNFINISHED_REPEAT_S = 30.0


@dataclass
class TxnSettings:
    partitions: int = 50
    max_timeout_ms: int = 900_000
    id_expiration_ms: int = 604_800_000
    abort_check_interval_ms: int = 10_000
    expiration_check_interval_ms: int = 3_600_000


def now_ms() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator:
    def __init__(self, broker: Broker, settings: TxnSettings, write_markers: MarkerWriter) -> None:
        self.broker = broker
        self.settings = settings
        self.write_markers = write_markers
        self.txns: dict[str, TxnMetadata] = {}
        self.owned: dict[int, int] = {}  # __transaction_state partition -> coordinator epoch (its leader epoch)
        self.loading: set[int] = set()
        self._completions: dict[str, asyncio.Task[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    # -- ownership --------------------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return murmur2_partition(transactional_id.encode(), self.settings.partitions)

    def error_for(self, transactional_id: str) -> E | None:
        partition = self.partition_for(transactional_id)
        if partition in self.loading:
            return E.coordinator_load_in_progress
        if partition not in self.owned:
            return E.not_coordinator
        return None

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._abort_timed_out_loop()),
                       asyncio.create_task(self._expire_loop())]

    async def close(self) -> None:
        await stop_tasks(*self._tasks, *self._completions.values())
        self._completions.clear()

    def load(self, partition: int, coordinator_epoch: int) -> None:
        """Replays one `__transaction_state` partition (it became ours) and finishes the transactions
        that were prepared there."""
        if self.owned.get(partition) == coordinator_epoch:
            return
        self.loading.add(partition)
        try:
            part = self.broker.partition(TXN_TOPIC, partition)
            if part is None:
                return
            loaded: dict[str, TxnMetadata] = {}
            plog = part.log
            # The whole log of the new leader, as Kafka loads it: its high watermark can lag what the
            # ISR acknowledged (a follower learns the HW a fetch later), and a Prepare* state acked to a
            # client but above it would be replayed as still Ongoing, then aborted by the timeout
            # while the old coordinator's COMMIT markers already reached some partitions: a torn
            # transaction (seen once under SIGKILL chaos).
            for batch in plog.batches(plog.log_start_offset, plog.log_end_offset):
                for record in decode_records(batch):
                    try:
                        if record.key is None:
                            continue
                        tid = decode_key(record.key)
                        if record.value is None:
                            loaded.pop(tid, None)
                        else:
                            loaded[tid] = TxnMetadata.from_value(tid, decode_value(record.value))
                    except (FormatError, UnicodeDecodeError, ValueError) as exc:
                        log.warning("skipping unreadable %s-%d record at %d: %s", TXN_TOPIC, partition,
                                    record.offset, exc)
            for tid in [t for t in self.txns if self.partition_for(t) == partition]:
                self._drop(tid)
            self.txns.update(loaded)
            self.owned[partition] = coordinator_epoch
            if loaded:
                log.info("loaded %d transactional ids from %s-%d (coordinator epoch %d)", len(loaded), TXN_TOPIC,
                         partition, coordinator_epoch)
        finally:
            self.loading.discard(partition)
        for tid, meta in loaded.items():
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                log.info("%s: completing a transaction prepared by the previous coordinator (%s)", tid,
                         meta.state.kafka_name)
                self._complete_later(tid)

    def unload(self, partition: int) -> None:
        self.owned.pop(partition, None)
        for tid in [t for t in self.txns if self.partition_for(t) == partition]:
            self._drop(tid)

    def _drop(self, tid: str) -> None:
        self.txns.pop(tid, None)
        task = self._completions.pop(tid, None)
        if task is not None:
            task.cancel()

    # -- writing the state ------------------------------------------------------------------------

    async def _transit(self, meta: TxnMetadata, target: TxnMetadata | None) -> E:
        """Writes `target` (a tombstone when None) for `meta`'s id and makes it current; the id is
        pending meanwhile. Returns the error to answer with."""
        tid = meta.transactional_id
        partition = self.partition_for(tid)
        epoch = self.owned.get(partition)
        part = self.broker.partition(TXN_TOPIC, partition)
        if epoch is None or part is None or not part.is_leader:
            return E.not_coordinator
        meta.pending = target.state if target is not None else TxnState.DEAD
        value = encode_value(target.to_value()) if target is not None else None
        batch = bytearray(build_batch([(encode_key(tid), value, [])], timestamp_ms=now_ms()))
        try:
            await part.append_internal(batch)
        except (TimeoutError, NotEnoughReplicasError) as exc:
            # below transaction.state.log.min.isr (before or after the append), or not confirmed in
            # time: the decision is not durable, so it is not made; the client retries (Kafka's mapping)
            meta.pending = None
            log.warning("%s: its state is not on enough replicas of %s-%d: %s", tid, TXN_TOPIC, partition,
                        exc or "timed out")
            return E.coordinator_not_available
        except Exception as exc:  # not leader any more, too few in-sync replicas: the client retries
            meta.pending = None
            log.warning("%s: cannot write its state to %s-%d: %s", tid, TXN_TOPIC, partition, exc)
            return E.not_coordinator
        if self.owned.get(partition) != epoch or self.txns.get(tid) is not meta:
            return E.not_coordinator  # the partition moved away meanwhile: whatever was loaded rules
        meta.pending = None
        if target is None:
            self.txns.pop(tid, None)
        else:
            self.txns[tid] = target
        return E.none

    def coordinator_epoch(self, tid: str) -> int:
        return self.owned.get(self.partition_for(tid), -1)

    # -- APIs ------------------------------------------------------------------------------------------

    async def init_producer_id(self, tid: str, timeout_ms: int,
                               expected: tuple[int, int] | None) -> tuple[E, int, int]:
        if not tid:
            return E.invalid_request, -1, -1
        if not 0 < timeout_ms <= self.settings.max_timeout_ms:
            return E.invalid_transaction_timeout, -1, -1
        error = self.error_for(tid)
        if error is not None:
            return error, -1, -1
        await self._settled(tid)
        meta = self.txns.get(tid)
        if meta is None:
            meta = TxnMetadata(tid, await self.broker.allocate_producer_id(), txn.NO_EPOCH, timeout_ms,
                               TxnState.EMPTY, last_update_ms=now_ms())
            if tid in self.txns:  # another request created it while the id was allocated
                meta = self.txns[tid]
            else:
                self.txns[tid] = meta
        new_pid = await self.broker.allocate_producer_id() if meta.epoch_exhausted else None
        try:
            target = txn.prepare_init(meta, timeout_ms, expected, now_ms(), new_pid)
        except TxnError as exc:
            return exc.code, -1, -1
        error = await self._transit(meta, target)
        if error != E.none:
            return error, -1, -1
        if target.state == TxnState.PREPARE_ABORT:
            # The ongoing transaction goes first (its epoch was bumped: its producer is fenced).
            log.info("%s: a new instance of the producer aborts the ongoing transaction (epoch %d)", tid,
                     target.producer_epoch)
            self._complete_later(tid)
            return E.concurrent_transactions, -1, -1
        log.info("%s: producer id %d, epoch %d", tid, target.producer_id, target.producer_epoch)
        return E.none, target.producer_id, target.producer_epoch

    async def _settled(self, tid: str) -> None:
        """Waits (briefly) for the id's previous transaction to finish completing. A producer starts
        its next transaction as soon as EndTxn is answered, while the markers are still being
        written; answering CONCURRENT_TRANSACTIONS then costs it a retry backoff (librdkafka:
        about 20 ms), which on a replicated cluster is most of a short transaction's time."""
        task = self._completions.get(tid)
        if task is not None and not task.done():
            with contextlib.suppress(asyncio.TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(task), SETTLE_WAIT_S)

    async def add_partitions(self, tid: str, producer_id: int, epoch: int, partitions: set[TopicPartition],
                             client_version: int = 0) -> E:
        if not tid:
            return E.invalid_request
        error = self.error_for(tid)
        if error is not None:
            return error
        await self._settled(tid)
        meta = self.txns.get(tid)
        try:
            target = txn.prepare_add(meta, producer_id, epoch, partitions, now_ms(), client_version)
        except TxnError as exc:
            return exc.code
        if target is None:
            return E.none
        assert meta is not None
        return await self._transit(meta, target)

    def verify(self, tid: str, producer_id: int, epoch: int,
               partitions: set[TopicPartition]) -> dict[TopicPartition, E]:
        """Whether each partition is in the ongoing transaction of (producer id, epoch) (KIP-890)."""
        error = self.error_for(tid) if tid else E.invalid_request
        if error is not None:
            return dict.fromkeys(partitions, error)
        meta = self.txns.get(tid)
        return {p: txn.verify(meta, producer_id, epoch, p) for p in partitions}

    async def end_txn(self, tid: str, producer_id: int, epoch: int, commit: bool,
                      client_version: int) -> tuple[E, int, int]:
        if not tid:
            return E.invalid_request, -1, -1
        error = self.error_for(tid)
        if error is not None:
            return error, -1, -1
        meta = self.txns.get(tid)
        new_pid = await self.broker.allocate_producer_id() \
            if meta is not None and client_version >= txn.TV2 and epoch + 1 >= txn.MAX_EPOCH - 1 else None
        meta = self.txns.get(tid)
        try:
            target = txn.prepare_end(meta, producer_id, epoch, commit, now_ms(), client_version, new_pid)
        except TxnError as exc:
            return exc.code, -1, -1
        assert meta is not None
        if target is None:  # a retry of an end already done
            return (E.none, *txn.end_result(meta))
        error = await self._transit(meta, target)
        if error != E.none:
            return error, -1, -1
        self._complete_later(tid)
        return (E.none, *txn.end_result(target))

    def describe(self, tid: str) -> tuple[E, TxnMetadata | None]:
        if not tid:
            return E.invalid_request, None
        error = self.error_for(tid)
        if error is not None:
            return error, None
        meta = self.txns.get(tid)
        if meta is None or meta.state == TxnState.DEAD:
            return E.transactional_id_not_found, None
        return E.none, meta

    def listing(self, states: set[str], producer_ids: set[int], min_duration_ms: int = -1) -> list[TxnMetadata]:
        now = now_ms()
        return [m for m in self.txns.values()
                if (not states or m.state.kafka_name in states) and (not producer_ids or m.producer_id in producer_ids)
                and (min_duration_ms < 0 or (m.state == TxnState.ONGOING and now - m.start_ms >= min_duration_ms))]

    # -- completing transactions ------------------------------------------------------------------

    def _complete_later(self, tid: str) -> None:
        previous = self._completions.get(tid)
        if previous is not None and not previous.done():
            return
        task = asyncio.create_task(self._complete(tid), name=f"txn-complete-{tid}")
        self._completions[tid] = task
        task.add_done_callback(lambda t, tid=tid: self._completions.pop(tid, None)
                               if self._completions.get(tid) is t else None)

    async def _complete(self, tid: str) -> None:
        """The markers of a prepared transaction, then its Complete* state (retried until written or
        the coordinator moves away)."""
        backoff = 0.05
        remaining: set[TopicPartition] | None = None
        reasons: dict[TopicPartition, str] = {}
        complete_error = "under way"  # why the Complete* record was not written, once every marker is
        started = time.monotonic()
        warn_at = started + UNFINISHED_WARN_S
        while True:
            meta = self.txns.get(tid)
            if meta is None or meta.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                return
            if time.monotonic() >= warn_at:
                # Retries are silent (each is a debug line): a producer whose every next transaction is
                # refused as concurrent with this one would otherwise wait without a word in any log.
                log.warning("%s: %s not finished after %.0f s; markers still to write: %s", tid, meta.state.name,
                            time.monotonic() - started, _unwritten(remaining, reasons, complete_error))
                warn_at = time.monotonic() + UNFINISHED_REPEAT_S
            if meta.pending is None:
                if remaining is None:
                    remaining = set(meta.partitions)
                reasons.clear()
                try:
                    outcome = await self.write_markers(meta, self.coordinator_epoch(tid), remaining, reasons)
                except Exception as exc:  # whatever went wrong, the transaction must still complete: retry
                    log.exception("%s: writing the markers failed; retrying", tid)
                    reasons.update(dict.fromkeys(remaining, f"{type(exc).__name__}: {exc}"))
                    outcome = Outcome.RETRY
                if outcome == Outcome.STALE:
                    return
                if outcome == Outcome.DONE:
                    error = await self._transit(meta, txn.complete(meta, now_ms()))
                    if error in (E.none, E.not_coordinator):
                        return
                    complete_error = error.name
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    async def _abort_timed_out_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.abort_check_interval_ms / 1000)
            with contextlib.suppress(Exception):
                await self.abort_timed_out()

    async def abort_timed_out(self) -> int:
        """Aborts every transaction open longer than its timeout, bumping its epoch (the producer is
        fenced: it learns with its next request). Returns how many."""
        count = 0
        now = now_ms()
        for tid, meta in list(self.txns.items()):
            target = txn.prepare_timeout_abort(meta, now)
            if target is None:
                continue
            log.info("%s: transaction open for %d ms, longer than its timeout %d ms: aborting it", tid,
                     now - meta.start_ms, meta.timeout_ms)
            if await self._transit(meta, target) == E.none:
                self._complete_later(tid)
                count += 1
        return count

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.expiration_check_interval_ms / 1000)
            with contextlib.suppress(Exception):
                await self.expire_ids()

    async def expire_ids(self) -> int:
        now = now_ms()
        idle = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        count = 0
        for tid, meta in list(self.txns.items()):
            expired = now - meta.last_update_ms > self.settings.id_expiration_ms
            if meta.state in idle and meta.pending is None and expired and await self._transit(meta, None) == E.none:
                log.info("%s: transactional id expired (idle %d ms)", tid, now - meta.last_update_ms)
                count += 1
        return count


def _unwritten(remaining: set[TopicPartition] | None, reasons: dict[TopicPartition, str], complete_error: str) -> str:
    if remaining is None:
        return "not started (the prepared state is still being written)"
    if not remaining:
        return f"none; the completed state not written: {complete_error}"
    return ", ".join(f"{t}-{p} ({reasons.get((t, p), 'not tried yet')})" for t, p in sorted(remaining))
