"""The log of one partition: an ordered list of segments in `<topic>-<partition>/`.

Durability: `append` writes to the page cache (the data survives a process crash, not a power
loss). `flush` fsyncs every segment holding data past the recovery point and then advances it;
the flush policy (flush.messages / flush.ms) decides when callers wait for that. The recovery
point is checkpointed by the LogManager; on start only segments past it are rescanned.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..config import TopicSettings
from .checkpoints import fsync_dir, fsync_file, replace_durably, replace_unsynced
from .dir_failure import guards_log_dir
from .leader_epochs import LeaderEpochCache
from .producer_state import CachedBatch, CompletedTxn, ProducerStateManager
from .records import (
    STAMPED_PREFIX,
    BatchHeader,
    control_marker,
    first_record_at,
    iter_batches,
    parse_header,
    record_with_max_timestamp,
    stamp_batch,
)
from .segment import FileSlice, Segment
from .txn_index import AbortedTxn

log = logging.getLogger(__name__)

LEADER_EPOCH_FILE = "leader-epoch-checkpoint"
MAX_UNREPLICATED = 10_000
LOG_START_FILE = "log-start-offset"


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time: int  # -1 for CreateTime topics
    duplicate: bool = False


@dataclass(slots=True)
class ReadResult:
    slices: list[FileSlice]
    size: int


class PartitionLog:
    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        settings: TopicSettings,
        recovery_point: int = 0,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.directory = directory
        self.log_dir = directory.parent  # the log directory (log.dirs entry) holding this partition
        self.topic = topic
        self.partition = partition
        self.settings = settings
        self.clock = clock
        self.recovery_point = recovery_point
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self.leader_epochs = LeaderEpochCache(directory / LEADER_EPOCH_FILE)
        self.producers = ProducerStateManager(directory)
        self.unflushed_messages = 0
        self.first_unflushed_ms: int | None = None
        self._flush_lock = asyncio.Lock()
        self.truncated_bytes_on_recovery = 0
        self._dir_dirty = False
        self._parent_dirty = False  # open() created the directory: its entry in the log dir is not yet durable
        self._unsynced_files: set[str] = set()  # small files written by write_unsynced, fsynced by the next flush
        self.written_topic_id: str | None = None  # the topic id this process wrote to partition.metadata
        self._start = 0  # DeleteRecords may put the log start inside the first segment
        self.moving = False  # being copied to another log directory: no retention, no compaction
        self.closed = False  # deleted, set aside, moved or shut down: nothing of it is to be synced
        # Transactions completed whose marker may not be replicated yet (the leader prunes them as
        # its high watermark passes their markers), and markers written per producer.
        self.unreplicated_txns: deque[CompletedTxn] = deque()
        self.marker_counts: dict[int, int] = {}

    # -- opening ---------------------------------------------------------------------------

    @guards_log_dir
    def open(self) -> None:
        """Loads segments; rescans and repairs every segment past the recovery point. A directory that
        does not exist yet is created with an empty first segment, reading nothing: creating thousands
        of partitions at once made about 25 file system calls per log here (ADR 0033)."""
        try:
            self.directory.mkdir(parents=True)
        except FileExistsError:
            pass
        else:
            self._parent_dirty = True
            self._dir_dirty = True
            self.segments = [Segment(self.directory, 0, self.settings["index.interval.bytes"])]
            self._bases = [0]
            self.recovery_point = 0
            return
        for stray in self.directory.glob("*.tmp"):
            stray.unlink()
        from .compaction import finish_interrupted_swap

        finish_interrupted_swap(self.directory)
        bases = sorted(int(p.stem) for p in self.directory.glob("*.log") if p.stem.isdigit())
        index_interval = self.settings["index.interval.bytes"]
        max_batch = self.settings["max.message.bytes"]
        self.segments = [Segment(self.directory, b, index_interval) for b in bases]
        damaged_from: int | None = None
        for i, seg in enumerate(self.segments):
            # Segment i holds offsets [base_i, base_i+1): rescan it if any may be unflushed.
            is_last = i == len(self.segments) - 1
            needs_scan = is_last or self.segments[i + 1].base_offset > self.recovery_point
            if not needs_scan and seg.load_indexes():
                continue
            truncated = seg.recover(max_batch)
            if truncated:
                log.warning(
                    "%s-%d: truncated %d invalid bytes at the end of segment %d",
                    self.topic, self.partition, truncated, seg.base_offset,
                )
                self.truncated_bytes_on_recovery += truncated
                damaged_from = i + 1
                break
        if damaged_from is not None:
            # Nothing after a damaged point can be trusted to be contiguous.
            for seg in self.segments[damaged_from:]:
                log.warning("%s-%d: deleting segment %d after a damaged one", self.topic, self.partition,
                            seg.base_offset)
                self.truncated_bytes_on_recovery += seg.size
                seg.delete()
            del self.segments[damaged_from:]
        if not self.segments:
            self.segments = [Segment(self.directory, 0, index_interval)]
        self._bases = [s.base_offset for s in self.segments]
        self._dir_dirty = True  # the directory entry of a new partition or segment is not yet durable
        start_file = self.directory / LOG_START_FILE
        if start_file.exists():
            with contextlib.suppress(ValueError):
                self._start = min(int(start_file.read_text().strip() or 0), self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        self._rebuild_producer_state()

    def _rebuild_producer_state(self) -> None:
        """The producer state at the log end: the latest snapshot at or below it, then the batches
        after it (markers end transactions again and index the aborted ones again)."""
        start = self.producers.load(upto=self.log_end_offset)
        if start is None or start < self.log_start_offset:
            self.producers.clear()
            start = self.log_start_offset
        for seg in self.segments:
            if seg.next_offset > start:
                seg.txn_index.truncate_from(start)
        for seg, position, header in self._batches_from(start):
            marker = control_marker(seg.read_batch(position, header)) if header.is_control else None
            self._index_completed(seg, self.producers.update(header, header.base_offset, marker))

    def _batches_from(self, offset: int):
        """(segment, position, header) of every batch holding an offset >= `offset`."""
        i = max(0, bisect.bisect_right(self._bases, offset) - 1)
        for seg in self.segments[i:]:
            start = 0
            if seg.base_offset <= offset:
                found = seg.find(offset)
                if found is None:
                    continue
                start = found[0]
            for position, header in seg.headers_from(start):
                yield seg, position, header

    def _index_completed(self, seg: Segment, completed: CompletedTxn | None) -> None:
        if completed is None:
            return
        self.unreplicated_txns.append(completed)
        if len(self.unreplicated_txns) > MAX_UNREPLICATED:
            self.unreplicated_txns.popleft()  # a follower never prunes: keep the recent ones only
        if completed.aborted:
            unstable = self.producers.first_unstable_offset()
            lso = completed.last_offset + 1 if unstable is None else min(unstable, completed.last_offset + 1)
            seg.txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset, lso))

    def batch_headers_from(self, offset: int):
        """Headers of every batch holding an offset >= `offset`."""
        for _, _, header in self._batches_from(offset):
            yield header

    # -- offsets ---------------------------------------------------------------------------

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active.next_offset

    @property
    def log_start_offset(self) -> int:
        return max(self.segments[0].base_offset, self._start)

    @guards_log_dir
    def advance_start(self, offset: int) -> int:
        """DeleteRecords (or a leader's log start reaching a follower): records below `offset` are
        gone for readers; whole segments below it are deleted. Returns the new log start."""
        offset = min(offset, self.log_end_offset)
        if offset <= self.log_start_offset:
            return self.log_start_offset
        while len(self.segments) > 1 and self.segments[1].base_offset <= offset:
            self._delete_first_segment("log start moved past it")
        self._start = offset
        replace_durably(self.directory / LOG_START_FILE, str(offset).encode())
        self.leader_epochs.truncate_from_start(offset)
        return offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- appending -------------------------------------------------------------------------

    def check_duplicate(self, header: BatchHeader) -> CachedBatch | None:
        return self.producers.check(header)

    @guards_log_dir
    def append(self, data: bytes | bytearray, headers: list[BatchHeader], leader_epoch: int) -> AppendResult:
        """Assigns offsets to validated batches (as leader) and writes them.

        The offset and leader epoch sit in the first bytes of a batch, outside its CRC, so only
        those prefixes are stamped (in small copies) and the batch bodies are written as
        received; LogAppendTime changes CRC-covered fields, so then the whole batch is copied."""
        append_time = self.clock() if self.settings["message.timestamp.type"] == "LogAppendTime" else None
        offset = self.log_end_offset
        base = offset
        located: list[tuple[int, BatchHeader]] = []
        chunks: list[bytes | bytearray | memoryview] = []
        view = memoryview(data)
        pos = 0
        markers: dict[int, tuple[bool, int]] = {}
        for header in headers:
            if header.is_control:
                markers[offset] = control_marker(bytes(view[pos:pos + header.size]))
            if append_time is None:
                prefix = bytearray(view[pos:pos + STAMPED_PREFIX])
                stamp_batch(prefix, 0, offset, leader_epoch, None)
                chunks += (prefix, view[pos + STAMPED_PREFIX:pos + header.size])
            else:
                batch = bytearray(view[pos:pos + header.size])
                stamp_batch(batch, 0, offset, leader_epoch, append_time)
                chunks.append(batch)
                header.max_timestamp = append_time
            header.base_offset = offset
            header.partition_leader_epoch = leader_epoch
            located.append((pos, header))
            offset = header.next_offset
            pos += header.size
        self._write(chunks, located, leader_epoch, markers)
        return AppendResult(base, offset - 1, append_time if append_time is not None else -1)

    def unseen_batches(self, data: bytes | bytearray | memoryview) -> list[tuple[int, BatchHeader]]:
        """(position, header) of the fetched batches this log does not have yet (a retried fetch repeats
        some), parsed once for both new_epochs and append_as_follower."""
        end_offset = self.log_end_offset
        return [(pos, header) for pos, header in iter_batches(data) if header.base_offset >= end_offset]

    def new_epochs(self, located: list[tuple[int, BatchHeader]]) -> list[tuple[int, int]]:
        """(epoch, base offset) of the unseen batches that start a leader epoch new to this log, in log order:
        the follower writes them to the epoch file before append_as_follower appends the batches."""
        latest = self.leader_epochs.latest_epoch
        new = []
        for _, header in located:
            epoch = header.partition_leader_epoch
            if epoch > latest:
                new.append((epoch, header.base_offset))
                latest = epoch
        return new

    @guards_log_dir
    def append_as_follower(self, data: bytes | bytearray | memoryview,
                           located: list[tuple[int, BatchHeader]] | None = None) -> int:
        """Appends batches that already carry offsets (replication): whole batches only, skipping
        any this log already has (a retried fetch); `located`: unseen_batches(data), when the caller has
        it; returns the new end offset."""
        if located is None:
            located = self.unseen_batches(data)
        if not located:
            return self.log_end_offset
        start = located[0][0]
        end = located[-1][0] + located[-1][1].size
        # The fetcher has written these already (ADR 0039), so this is empty unless a caller did not;
        # fsynced by the flush that covers these records.
        for epoch, offset in self.new_epochs(located):
            self.leader_epochs.assign(epoch, offset, durable=False)
        markers = {header.base_offset: control_marker(bytes(memoryview(data)[pos:pos + header.size]))
                   for pos, header in located if header.is_control}
        self._write([memoryview(data)[start:end]], [(pos - start, h) for pos, h in located], None, markers)
        return self.log_end_offset

    def _write(self, chunks: list[bytes | bytearray | memoryview], located: list[tuple[int, BatchHeader]],
               leader_epoch: int | None, markers: dict[int, tuple[bool, int]]) -> None:
        first = located[0][1]
        if leader_epoch is not None and leader_epoch > self.leader_epochs.latest_epoch:
            self.leader_epochs.assign(leader_epoch, first.base_offset)
        size = sum(len(c) for c in chunks)
        self._maybe_roll(size, first)
        self.active.append(chunks, size, located)
        messages = 0
        for _, header in located:
            if header.is_control:
                self.marker_counts[header.producer_id] = self.marker_counts.get(header.producer_id, 0) + 1
            completed = self.producers.update(header, header.base_offset, markers.get(header.base_offset))
            self._index_completed(self.active, completed)
            messages += header.records_count
        self.unflushed_messages += messages
        if self.first_unflushed_ms is None:
            self.first_unflushed_ms = self.clock()

    def _maybe_roll(self, incoming: int, first: BatchHeader) -> None:
        seg = self.active
        if seg.size == 0:
            return
        too_big = seg.size + incoming > self.settings["segment.bytes"]
        # As Kafka: age is measured in record time, incoming max timestamp minus the first batch's.
        first_ts = seg.first_batch_timestamp
        roll_ms = self.settings["segment.ms"]
        if self.settings.compacted:  # KIP-354: the active segment is never cleaned, so it rolls in time
            roll_ms = min(roll_ms, self.settings["max.compaction.lag.ms"])
        too_old = first_ts is not None and first.max_timestamp - first_ts > roll_ms
        if too_big or too_old:
            self.roll()

    @guards_log_dir
    def roll(self) -> None:
        seg = self.active
        if seg.size == 0:
            return
        seg.flush(fsync=False)
        new = Segment(self.directory, seg.next_offset, self.settings["index.interval.bytes"])
        self.segments.append(new)
        self._bases.append(new.base_offset)
        self._dir_dirty = True
        # As Kafka: a snapshot at every roll bounds what opening or truncating the log rescans.
        self.producers.save(new.base_offset)

    # -- flushing --------------------------------------------------------------------------

    def flush_due(self) -> bool:
        first = self.first_unflushed_ms
        if first is None:  # nothing unflushed (asked of every log each second: the cheap answer first)
            return False
        return (self.unflushed_messages >= self.settings["flush.messages"]
                or self.clock() - first >= self.settings["flush.ms"])

    @guards_log_dir
    async def flush(self) -> None:
        """fsyncs everything appended so far; concurrent callers share one fsync."""
        target = self.log_end_offset
        async with self._flush_lock:
            # A flush can be due from before the log was closed: the checkpoint's round over every log, a
            # follower's flush task. Its directory may be renamed away by then (a deleted topic).
            if self.closed or self.recovery_point >= target:
                return
            end = self.log_end_offset
            dirty = [s for s in self.segments if s.next_offset > self.recovery_point]
            self.unflushed_messages = 0
            self.first_unflushed_ms = None
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(None, self._fsync, dirty)
            except FileNotFoundError:
                if not self.closed:
                    raise
                return  # deleted or set aside while its files were synced: renamed, so their paths are gone
            self.recovery_point = max(self.recovery_point, end)

    @guards_log_dir
    def flush_sync(self, sync_parent: bool = True) -> bool:
        """fsyncs everything appended so far, in the calling thread. With sync_parent=False the log
        directory's own entry in its parent is left to the caller (one fsync of the parent for many
        new logs); the answer says whether it still needs one."""
        dirty = [s for s in self.segments if s.next_offset > self.recovery_point]
        parent_pending = self._fsync(dirty, sync_parent)
        self.unflushed_messages = 0
        self.first_unflushed_ms = None
        self.recovery_point = self.log_end_offset
        return parent_pending

    def _fsync(self, segments: list[Segment], sync_parent: bool = True) -> bool:
        # The epochs of the records being made durable first: every epoch assigned before the flush took
        # its end offset is in the file synced here. A directory fsynced below anyway makes the epoch
        # file's entry durable too: no fsync of it in between.
        dir_dirty = self._dir_dirty
        self.leader_epochs.sync(sync_dir=not dir_dirty)
        for seg in segments:
            if seg.fd >= 0:
                seg.flush(fsync=True)
        if dir_dirty:
            self._dir_dirty = False
            for name in list(self._unsynced_files):
                fsync_file(self.directory / name)
            self._unsynced_files.clear()
            fsync_dir(self.directory)
            if self._parent_dirty:
                self._parent_dirty = False
                if not sync_parent:
                    return True
                fsync_dir(self.directory.parent)
        return False

    @guards_log_dir
    def write_unsynced(self, name: str, data: bytes) -> None:
        """Replaces the small file `name` in this log's directory without an fsync; the next flush
        makes it durable before any record it flushes (a new log's topic id: ADR 0033). Only before the
        log is in use (preparing a new log in an I/O thread)."""
        replace_unsynced(self.directory / name, data)
        self._unsynced_files.add(name)
        self._dir_dirty = True

    # -- reading ---------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one_batch: bool) -> ReadResult:
        """Bytes from the batch holding `offset` up to `max_offset` (exclusive), at most
        `max_bytes` unless the first batch alone is larger and `min_one_batch` is set. The last
        batch may be cut short, as Kafka does; clients drop a partial trailing batch."""
        slices: list[FileSlice] = []
        total = 0
        if offset >= max_offset:
            return ReadResult(slices, 0)
        i = max(0, bisect.bisect_right(self._bases, offset) - 1)
        for seg in self.segments[i:]:
            if seg.base_offset >= max_offset or total >= max_bytes:
                break
            found = seg.find(offset) if slices == [] else (0, None)
            if found is None:
                continue
            start, header = found
            end = seg.size if seg.next_offset <= max_offset else seg.position_of(max_offset)
            if end <= start:
                continue
            budget = max_bytes - total
            size = end - start
            if size > budget:
                first_size = header.size if header is not None else 0
                size = max(budget, first_size) if (min_one_batch and not slices) else budget
            if size <= 0:
                break
            slices.append(FileSlice(seg.fd, start, size))
            total += size
        return ReadResult(slices, total)

    def bytes_from(self, offset: int) -> int:
        """Bytes of the log from the batch holding `offset` to its end: what a replica that has
        everything before `offset` still lacks."""
        if offset >= self.log_end_offset:
            return 0
        i = max(0, bisect.bisect_right(self._bases, offset) - 1)
        found = self.segments[i].find(offset)
        total = self.segments[i].size - (found[0] if found else 0)
        return total + sum(seg.size for seg in self.segments[i + 1:])

    def read_batches(self, offset: int, max_offset: int, max_bytes: int) -> list[bytes]:
        """Whole batches from `offset` below `max_offset`, at most about `max_bytes` of them (decoded path for
        tools and share groups)."""
        out: list[bytes] = []
        seen = 0
        for batch in self.batches(offset, max_offset):
            if seen >= max_bytes:
                break
            out.append(batch)
            seen += len(batch)
        return out

    def batches(self, offset: int, max_offset: int) -> Iterator[bytes]:
        """Whole batches from `offset` below `max_offset`, read one at a time as they are asked for (the
        coordinators' loads and compaction go through a whole log this way without holding it in memory)."""
        i = max(0, bisect.bisect_right(self._bases, offset) - 1)
        for seg in self.segments[i:]:
            found = seg.find(offset) if seg.base_offset <= offset else (0, None)
            if found is None:
                continue
            for position, header in seg.headers_from(found[0]):
                if header.base_offset >= max_offset:
                    return
                yield seg.read_batch(position, header)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record whose timestamp >= target, or None (the batches found by
        batch_at_timestamp, decoded here: the ListOffsets handler decodes them off the loop instead)."""
        after = -1
        while (batch := self.batch_at_timestamp(timestamp, after)) is not None:
            found = first_record_at(batch, timestamp)
            if found is not None:
                return found
            after = parse_header(batch).last_offset
        return None

    def batch_at_timestamp(self, timestamp: int, after: int = -1) -> bytes | None:
        """The first batch past offset `after` whose max timestamp reaches `timestamp`, found from the time
        index and the batch headers alone, as Kafka's findOffsetByTimestamp: one batch is read, and its
        records are the caller's to decode. (Every batch from the time index's entry to the log end used to
        be read into memory and decoded on the event loop: 859 ms per partition for one zip bomb.)"""
        for seg in self.segments:
            if seg.max_timestamp < timestamp:
                continue
            candidate = seg.time_index.lookup(timestamp)
            found = seg.find(max(candidate if candidate is not None else seg.base_offset, after + 1))
            if found is None:
                continue
            for position, header in seg.headers_from(found[0]):
                if header.last_offset > after and header.max_timestamp >= timestamp:
                    return seg.read_batch(position, header)
        return None

    def max_timestamp_offset(self, limit: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with the highest timestamp below `limit` (KIP-734)."""
        found = self.max_timestamp_batch(limit)
        return None if found is None else record_with_max_timestamp(found, limit)

    def max_timestamp_batch(self, limit: int) -> bytes | None:
        """The batch holding the first record with the highest timestamp below `limit` (KIP-734; not the last
        offset of its batch, Kafka's KAFKA-16310), for record_with_max_timestamp. Segments are visited newest
        maximum first, and only their batch headers are read until no other segment can hold a higher one."""
        best: tuple[int, int, int, BatchHeader] | None = None  # timestamp, segment index, position, header
        order = sorted(range(len(self.segments)), key=lambda i: (-self.segments[i].max_timestamp, i))
        for i in order:
            seg = self.segments[i]
            if best is not None and seg.max_timestamp < best[0]:
                break
            for position, header in seg.headers_from(0):
                if header.base_offset >= limit:
                    break
                key = (header.max_timestamp, -header.base_offset)
                if best is None or key > (best[0], -best[3].base_offset):
                    best = (header.max_timestamp, i, position, header)
        if best is None:
            return None
        _, i, position, header = best
        return self.segments[i].read_batch(position, header)

    # -- retention and truncation ------------------------------------------------------------

    @guards_log_dir
    def apply_retention(self) -> int:
        """Deletes whole segments past retention.ms / retention.bytes; returns how many."""
        if not self.settings.deletes:
            return 0
        now = self.clock()
        retention_ms = self.settings["retention.ms"]
        retention_bytes = self.settings["retention.bytes"]
        if retention_ms >= 0 and self.active.size and now - self.active.max_timestamp > retention_ms:
            self.roll()  # an expired active segment is rolled so it can go too, as Kafka does
        deleted = 0
        size = self.size_bytes
        while len(self.segments) > 1:
            seg = self.segments[0]
            expired = retention_ms >= 0 and now - seg.max_timestamp > retention_ms
            oversized = retention_bytes >= 0 and size - seg.size >= retention_bytes
            if not (expired or oversized):
                break
            size -= seg.size
            self._delete_first_segment("retention")
            deleted += 1
        if deleted:
            self.leader_epochs.truncate_from_start(self.log_start_offset)
        return deleted

    def _delete_first_segment(self, why: str) -> None:
        seg = self.segments.pop(0)
        self._bases.pop(0)
        log.info("%s-%d: deleting segment %d (%s)", self.topic, self.partition, seg.base_offset, why)
        seg.delete()

    @guards_log_dir
    def truncate_to(self, offset: int) -> None:
        """Removes every record at or after offset (follower divergence repair)."""
        if offset >= self.log_end_offset:
            return
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            seg = self.segments.pop()
            self._bases.pop()
            seg.delete()
        self.active.truncate_to_offset(offset)
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.producers.drop_snapshots_after(self.log_end_offset)
        self.unreplicated_txns.clear()
        self._rebuild_producer_state()

    @guards_log_dir
    def reset_to(self, offset: int) -> None:
        """Drops the whole log and starts empty at `offset` (a replica that fell behind the
        leader's log start)."""
        for seg in self.segments:
            seg.delete()
        self.segments = [Segment(self.directory, offset, self.settings["index.interval.bytes"])]
        self._bases = [offset]
        self._start = offset
        (self.directory / LOG_START_FILE).unlink(missing_ok=True)
        self.recovery_point = offset
        self.leader_epochs.truncate_from_end(0)
        self.producers.clear()
        self.producers.drop_snapshots_after(-1)
        self.unreplicated_txns.clear()
        self._dir_dirty = True

    # -- transactions ------------------------------------------------------------------------

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions with records in [start, end): their markers are at or after `start`,
        so only the segments from the one holding `start` are looked at."""
        i = max(0, bisect.bisect_right(self._bases, start) - 1)
        out: list[AbortedTxn] = []
        for seg in self.segments[i:]:
            out += seg.txn_index.overlapping(start, end)
        return out

    @guards_log_dir
    def checkpoint_producers(self) -> None:
        # The snapshot covers exactly the batches below the current end offset; on start it is
        # used only if the recovered log still reaches that offset.
        self.producers.save(self.log_end_offset)

    @guards_log_dir
    def close(self) -> None:
        self.closed = True
        for seg in self.segments:
            seg.close()
