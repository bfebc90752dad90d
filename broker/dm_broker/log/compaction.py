"""Log compaction for `cleanup.policy=compact` topics (the log cleaner).

Keeps the latest record of every key; a tombstone (null value) is kept for
`delete.retention.ms` after its batch's timestamp so consumers can see the delete, then dropped.
Only closed segments are cleaned; the active segment is read to learn the latest offsets but never
rewritten. Cleaned segments are merged up to `segment.bytes`, written to `.cleaned` files, fsynced
and swapped in with a rename. Offsets never change: a compacted log has gaps, as in Kafka.

Transactions: nothing at or past the first offset of an open transaction is cleaned; records of
aborted transactions go (and never count as a key's latest value); an ABORT marker goes once older
than `delete.retention.ms`, a COMMIT marker once, in addition, none of its transaction's records is
left (a transactional batch without its marker would look open when the producer state is rebuilt).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..private_files import FILE_MODE
from ..tasks import stop_tasks
from . import dir_failure
from .checkpoints import fsync_dir, replace_durably
from .partition_log import PartitionLog
from .records import control_marker, decode_records, parse_header, rebuild_batch
from .segment import Segment

log = logging.getLogger(__name__)

SWAP_MARKER = "compaction-swap.json"


@dataclass
class CleanResult:
    segments_before: int
    segments_after: int
    bytes_before: int
    bytes_after: int
    records_removed: int


class LogCleaner:
    def __init__(self, logs: dict, interval_ms: int, enabled: bool = True) -> None:
        self.logs = logs  # (topic, partition) -> PartitionLog, shared with the LogManager
        self.interval = interval_ms / 1000
        self.enabled = enabled
        self.cleaned_upto: dict[tuple[str, int], int] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.enabled:
            self._task = asyncio.create_task(self._run())

    async def close(self) -> None:
        await stop_tasks(self._task)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            for key, plog in list(self.logs.items()):
                if plog.moving or not plog.settings.compacted or not self.needs_cleaning(key, plog):
                    continue
                try:
                    await self.clean(key, plog)
                except Exception as exc:
                    dir_failure.check(exc, plog.log_dir)
                    log.exception("compaction of %s-%d failed; the log is unchanged", *key)

    def needs_cleaning(self, key: tuple[str, int], plog: PartitionLog, now_ms: int | None = None) -> bool:
        """Enough of the closed segments is dirty (min.cleanable.dirty.ratio), or the oldest dirty
        record waited longer than max.compaction.lag.ms (KIP-354)."""
        closed = plog.segments[:-1]
        total = sum(s.size for s in closed)
        if total == 0:
            return False
        upto = self.cleaned_upto.get(key, -1)
        dirty_segments = [s for s in closed if s.base_offset >= upto and s.size]
        dirty = sum(s.size for s in dirty_segments)
        if dirty == 0:
            return False
        if dirty / total >= float(plog.settings["min.cleanable.dirty.ratio"]):
            return True
        now = int(time.time() * 1000) if now_ms is None else now_ms
        first = dirty_segments[0].first_batch_timestamp
        return first is not None and first >= 0 and now - first > plog.settings["max.compaction.lag.ms"]

    async def clean(self, key: tuple[str, int], plog: PartitionLog) -> CleanResult | None:
        unstable = plog.producers.first_unstable_offset()
        closed = plog.segments[:-1]
        if unstable is not None:
            closed = [s for s in closed if s.next_offset <= unstable]  # a prefix: segments are in order
        # A value written in a transaction still open must not make the values before it obsolete.
        end_offset = plog.log_end_offset if unstable is None else min(plog.log_end_offset, unstable)
        min_lag = plog.settings["min.compaction.lag.ms"]
        if min_lag > 0:
            # min.compaction.lag.ms: cleaning stops at the first segment holding a record younger than
            # the lag (nor the active segment), and records from there on make nothing obsolete yet.
            cutoff = int(time.time() * 1000) - min_lag
            young = next((i for i, s in enumerate(closed) if s.max_timestamp > cutoff), len(closed))
            bound = closed[young].base_offset if young < len(closed) else plog.segments[-1].base_offset
            closed = closed[:young]
            end_offset = min(end_offset, bound)
        if not closed:
            return None
        horizon = int(time.time() * 1000) - plog.settings["delete.retention.ms"]
        max_bytes = plog.settings["segment.bytes"]
        loop = asyncio.get_running_loop()
        plan = await loop.run_in_executor(None, _build_cleaned_files, plog, closed, end_offset, horizon, max_bytes)
        if plan is None:
            return None
        outputs, removed = plan
        # Swap on the event loop: nothing reads a segment while this runs.
        current = plog.segments
        if plog.closed or current[: len(closed)] != closed:
            for path, _ in outputs:
                path.unlink(missing_ok=True)
            # retention or truncation changed the log meanwhile (try again later), or it was deleted, set
            # aside or moved: its directory must not be written again (the marker would create it)
            return None
        bytes_before = sum(s.size for s in closed)
        # Crash safety: the cleaned files are complete and fsynced; the marker commits the swap, so
        # a restart rolls it forward (finish_interrupted_swap) instead of mixing old and new files.
        marker = plog.directory / SWAP_MARKER
        replace_durably(marker, json.dumps({"outputs": [[p.name, b] for p, b in outputs],
                                            "replaced": [s.base_offset for s in closed]}).encode())
        for seg in closed:
            seg.close()
        _apply_swap(plog.directory, [(p.name, b) for p, b in outputs], [s.base_offset for s in closed])
        new_segments = []
        interval = plog.settings["index.interval.bytes"]
        for _, base in outputs:
            seg = Segment(plog.directory, base, interval)
            seg.recover(max(plog.settings["max.message.bytes"], 1 << 20))
            new_segments.append(seg)
        marker.unlink()
        fsync_dir(plog.directory)
        plog.segments = new_segments + current[len(closed):]
        plog._bases = [s.base_offset for s in plog.segments]
        self.cleaned_upto[key] = plog.segments[-1].base_offset
        result = CleanResult(len(closed), len(new_segments), bytes_before, sum(s.size for s in new_segments), removed)
        log.info("compacted %s-%d: %d segments (%d bytes) -> %d (%d bytes), %d records removed", key[0], key[1],
                 result.segments_before, result.bytes_before, result.segments_after, result.bytes_after, removed)
        return result


def _build_cleaned_files(plog: PartitionLog, closed: list[Segment], end_offset: int, horizon: int,
                         max_bytes: int) -> tuple[list[tuple[Path, int]], int] | None:
    """Runs in a worker thread: reads, never modifies, the live segments."""
    aborted = {(t.producer_id, t.first_offset, t.last_offset) for s in plog.segments for t in s.txn_index.entries}

    def in_aborted(header) -> bool:
        return header.is_transactional and not header.is_control and any(
            pid == header.producer_id and first <= header.base_offset <= last for pid, first, last in aborted)

    latest: dict[bytes, int] = {}
    for batch in plog.batches(plog.log_start_offset, end_offset):
        header = parse_header(batch)
        if header.is_control or in_aborted(header):
            continue
        for record in decode_records(batch):
            if record.key is not None:
                latest[record.key] = record.offset
    outputs: list[tuple[Path, int]] = []
    removed = 0
    current: tuple[Path, int] | None = None
    fd = -1
    size = 0
    kept_in_txn: dict[int, int] = {}  # producer id -> records of its current transaction kept so far
    try:
        for seg in closed:
            for position, header in seg.headers_from(0):
                batch = seg.read_batch(position, header)
                records = decode_records(batch)
                if header.is_control:
                    committed, _ = control_marker(batch)
                    left = kept_in_txn.pop(header.producer_id, 0)
                    old = header.max_timestamp < horizon
                    kept = [] if old and (not committed or left == 0) else records
                elif in_aborted(header):
                    kept = []
                else:
                    kept = [r for r in records if _keep(r, latest, header.max_timestamp, horizon)]
                    if header.is_transactional:
                        kept_in_txn[header.producer_id] = kept_in_txn.get(header.producer_id, 0) + len(kept)
                removed += len(records) - len(kept)
                if not kept:
                    continue
                data = batch if len(kept) == len(records) else rebuild_batch(batch, kept)
                if current is None or size + len(data) > max_bytes:
                    if fd >= 0:
                        os.fsync(fd)
                        os.close(fd)
                    path = plog.directory / f"{header.base_offset:020d}.log.cleaned"
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
                    current = (path, header.base_offset)
                    outputs.append(current)
                    size = 0
                os.write(fd, data)
                size += len(data)
    finally:
        if fd >= 0:
            os.fsync(fd)
            os.close(fd)
    if not outputs:
        # Everything closed was obsolete: keep one empty segment so the log start stays put.
        path = plog.directory / f"{closed[0].base_offset:020d}.log.cleaned"
        path.write_bytes(b"")
        outputs.append((path, closed[0].base_offset))
    return outputs, removed


def _keep(record, latest: dict[bytes, int], batch_timestamp: int, horizon: int) -> bool:
    if record.key is None:
        return True
    if latest.get(record.key) != record.offset:
        return False
    return not (record.value is None and batch_timestamp < horizon)


def _apply_swap(directory: Path, outputs: list[tuple[str, int]], replaced: list[int]) -> None:
    """Idempotent: removes the replaced segments and moves the cleaned files into place. A replaced
    base that is also an output base is overwritten by the rename only while its .cleaned exists."""
    pending = {base for name, base in outputs if (directory / name).exists()}
    output_bases = {base for _, base in outputs}
    for base in replaced:
        if base in output_bases and base not in pending:
            continue  # already renamed: this .log is the cleaned one
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            (directory / f"{base:020d}{suffix}").unlink(missing_ok=True)
    for name, base in outputs:
        source = directory / name
        if source.exists():
            for suffix in (".index", ".timeindex", ".txnindex"):
                (directory / f"{base:020d}{suffix}").unlink(missing_ok=True)
            os.replace(source, directory / f"{base:020d}.log")
    fsync_dir(directory)


def finish_interrupted_swap(directory: Path) -> None:
    """Called before a partition is opened: completes a committed swap, drops an uncommitted one."""
    marker = directory / SWAP_MARKER
    if marker.exists():
        try:
            doc = json.loads(marker.read_text())
            _apply_swap(directory, [(n, int(b)) for n, b in doc["outputs"]], [int(b) for b in doc["replaced"]])
            log.warning("%s: finished a compaction interrupted by a crash", directory.name)
        except (ValueError, KeyError, TypeError):
            log.error("%s: unreadable compaction marker; leaving segments as they are", directory.name)
        marker.unlink(missing_ok=True)
    for stray in directory.glob("*.cleaned"):
        stray.unlink()
