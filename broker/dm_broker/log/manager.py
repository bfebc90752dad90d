"""All partition logs of a broker and the background work on them: time-based flush,
recovery-point checkpoints, producer-state snapshots and retention."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kio.schema.errors import ErrorCode

from .. import open_files
from ..config import BrokerConfig, TopicSettings
from ..errors import KafkaError
from ..tasks import stop_tasks
from . import dir_failure, strays
from .checkpoints import fsync_dir, read_offsets, write_offsets
from .compaction import LogCleaner
from .partition_log import PartitionLog

log = logging.getLogger(__name__)
SHUTDOWN_FLUSH_THREADS = 16
STRAY_RESCAN_S = 10

RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"
CLEAN_SHUTDOWN = ".dm_cleanshutdown"


def _copy_dir(source: Path, target: Path, only_changed: bool = False) -> int:
    """Copies a partition directory's files (with only_changed: those that differ in size or are
    new, appended-to segments from where the copy ends); returns the bytes copied."""
    target.mkdir(parents=True, exist_ok=True)
    copied = 0
    for src in sorted(source.iterdir()):
        if not src.is_file():
            continue
        dst = target / src.name
        size = src.stat().st_size
        have = dst.stat().st_size if dst.exists() else 0
        if only_changed and have == size and src.suffix == ".log":
            continue
        if only_changed and src.suffix == ".log" and 0 < have < size:
            with open(src, "rb") as fin, open(dst, "r+b") as fout:
                fin.seek(have)
                fout.seek(have)
                chunk = fin.read()
                fout.write(chunk)
                fout.flush()
                os.fsync(fout.fileno())
            copied += len(chunk)
            continue
        shutil.copyfile(src, dst)
        with open(dst, "rb") as f:
            os.fsync(f.fileno())
        copied += size
    for gone in set(p.name for p in target.iterdir()) - set(p.name for p in source.iterdir()):
        (target / gone).unlink(missing_ok=True)  # a segment retention removed meanwhile
    fsync_dir(target)
    return copied


def _write_snapshots(snapshots: list) -> None:
    for producers, offset, data, generation in snapshots:
        producers.write_snapshot(offset, data, generation)


class RecoveryAborted(Exception):
    """Start-up was stopped (SIGTERM) while the logs were being recovered."""


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    topic, sep, partition = name.rpartition("-")
    if not sep or not partition.isdigit() or not topic:
        return None
    return topic, int(partition)


class LogManager:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.dirs = config.log_dirs
        self.data_dir = self.dirs[0]
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self._moving: dict[tuple[str, int], tuple[Path, int]] = {}  # key -> (target directory, bytes copied)
        self._tasks: list[asyncio.Task[None]] = []
        self.recovery_seconds = 0.0
        self.cleaner = LogCleaner(self.logs, config["log.cleaner.backoff.ms"], config["log.cleaner.enable"])
        self.previous_shutdown = "clean"  # clean | unclean | none (a new data directory)
        self.abort_recovery = threading.Event()
        self._checkpoint_pending = False  # a log was removed since the recovery checkpoint was written
        self._strays: list[strays.Stray] | None = None  # the last scan (strays())
        self.open_file_limit = open_files.raise_soft_limit()
        self._short_of_files = False  # warned that the limit is too low (once until it is enough again)
        self.open_segments = 0  # counted with each stray rescan, and one more for each new log meanwhile

    def open_all(self, settings_for: Callable[[str], TopicSettings | None]) -> None:
        """Opens every partition directory (controller metadata later says which to keep)."""
        start = time.monotonic()
        for directory in self.dirs:
            directory.mkdir(parents=True, exist_ok=True)
        marker = self.data_dir / CLEAN_SHUTDOWN
        entries = sorted(p for directory in self.dirs for p in directory.iterdir())
        has_logs = any(p.is_dir() and parse_partition_dir(p.name) for p in entries)
        if marker.exists():
            self.previous_shutdown = "clean"
        elif not has_logs and not (self.data_dir / RECOVERY_CHECKPOINT).exists():
            self.previous_shutdown = "none (new data directory)"
        else:
            self.previous_shutdown = "unclean"
        marker.unlink(missing_ok=True)
        recovery = read_offsets(self.data_dir / RECOVERY_CHECKPOINT)
        to_open: list[tuple[Path, tuple[str, int], TopicSettings]] = []
        for path in entries:
            if self.abort_recovery.is_set():
                raise RecoveryAborted
            if path.name.endswith(("-delete", "-future")) and path.is_dir():
                shutil.rmtree(path, ignore_errors=True)  # deletions and moves a crash interrupted
                continue
            parsed = parse_partition_dir(path.name) if path.is_dir() else None
            if parsed is None:
                continue
            settings = settings_for(parsed[0])
            if settings is None:
                log.warning("ignoring %s: topic is not in the metadata", path)
                continue
            if parsed in self.logs or any(p == parsed for _, p, _ in to_open):
                log.warning("%s-%d is in two log directories; keeping the first", *parsed)
                continue
            to_open.append((path, parsed, settings))

        def open_one(item: tuple[Path, tuple[str, int], TopicSettings]) -> PartitionLog:
            if self.abort_recovery.is_set():
                raise RecoveryAborted
            path, parsed, settings = item
            plog = PartitionLog(path, parsed[0], parsed[1], settings, recovery.get(parsed, 0))
            plog.open()
            return plog

        # num.recovery.threads.per.data.dir: reading indexes and checking batches is mostly I/O and C
        # (CRC32C), so several threads per directory shorten a start-up with thousands of logs.
        threads = self.config["num.recovery.threads.per.data.dir"] * len(self.dirs)
        if threads > 1 and len(to_open) > 1:
            with ThreadPoolExecutor(threads, thread_name_prefix="dm-recovery") as pool:
                opened = list(pool.map(open_one, to_open))
        else:
            opened = [open_one(item) for item in to_open]
        for plog in opened:
            self.logs[(plog.topic, plog.partition)] = plog
        self._strays = strays.find(self.dirs)  # here, off the event loop (recovery runs in a thread)
        self.recovery_seconds = time.monotonic() - start
        self.check_open_files()

    def check_open_files(self) -> None:
        """Warns (once, until it is enough again) when the open-file limit is below what the open
        segments need. At start and with each stray rescan (every STRAY_RESCAN_S)."""
        segments = self.open_segments = sum(len(plog.segments) for plog in self.logs.values())
        problem = open_files.shortfall(self.open_file_limit, segments)
        if problem is not None and not self._short_of_files:
            log.warning("%s", problem)
        self._short_of_files = problem is not None

    def connection_budget(self) -> int:
        """Connections the broker may hold without taking descriptors its logs need."""
        return open_files.connection_budget(self.open_file_limit, self.open_segments)

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def create(self, topic: str, partition: int, settings: TopicSettings) -> PartitionLog:
        existing = self.logs.get((topic, partition))
        if existing is not None:
            return existing
        self.settle()  # a removed log of this name must not lend the new one its recovery point
        plog = self.prepare(topic, partition, settings, self.place([(topic, partition)])[(topic, partition)])
        self.adopt(plog)
        return plog

    def place(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], Path]:
        """The log directory for each of these new logs: with JBOD the one holding the fewest partitions,
        counting those placed before it in the same call (one pass over the logs, not one per log)."""
        if len(self.dirs) == 1:
            return dict.fromkeys(keys, self.dirs[0])
        held = Counter(p.directory.parent for p in self.logs.values())
        placed = {}
        for key in keys:
            directory = min(self.dirs, key=lambda d: (held[d], self.dirs.index(d)))
            held[directory] += 1
            placed[key] = directory
        return placed

    @staticmethod
    def prepare(topic: str, partition: int, settings: TopicSettings, directory: Path) -> PartitionLog:
        """A new log, opened but not yet one of this manager's: only file work on its own directory, so
        brokers create many side by side in the I/O threads. Call settle() before, and adopt() after, on
        the event loop."""
        plog = PartitionLog(directory / f"{topic}-{partition}", topic, partition, settings)
        plog.open()
        return plog

    def adopt(self, plog: PartitionLog) -> None:
        self.logs[(plog.topic, plog.partition)] = plog
        self.open_segments += len(plog.segments)  # until the next count (thousands of new logs at once)

    def settle(self) -> None:
        """After a batch of removals (one metadata update may delete or set aside thousands of logs): the
        recovery checkpoint is written once. Per removal it was a pass over every log, with an fsync, on
        the event loop (O(P^2) for a large topic)."""
        if self._checkpoint_pending:
            self.write_recovery_checkpoint()

    # -- JBOD ------------------------------------------------------------------------------

    def moving_into(self, directory: Path) -> list[tuple[tuple[str, int], int]]:
        return [(key, copied) for key, (target, copied) in self._moving.items() if target == directory]

    @staticmethod
    def disk_usage(directory: Path) -> tuple[int, int]:
        usage = shutil.disk_usage(directory)
        return usage.total, usage.free

    async def move(self, topic: str, partition: int, target: str, holder: object | None) -> None:
        """Moves a partition's log to another log directory (AlterReplicaLogDirs). The files are
        copied in a thread while the log keeps serving; then, in one step of the event loop (no
        append can interleave), what was appended since is copied, the copy opened in place of the
        original, and the original deleted. Retention and compaction wait for the move."""
        key = (topic, partition)
        directory = Path(target)
        if directory not in self.dirs:
            raise KafkaError(ErrorCode.log_dir_not_found, f"{target} is not one of this broker's log.dirs")
        plog = self.logs.get(key)
        if plog is None:
            raise KafkaError(ErrorCode.replica_not_available, f"{topic}-{partition} has no replica here")
        if plog.directory.parent == directory:
            return
        if key in self._moving:
            raise KafkaError(ErrorCode.reassignment_in_progress, f"{topic}-{partition} is already moving")
        future = directory / f"{plog.directory.name}.{uuid.uuid4().hex[:8]}-future"
        plog.moving = True
        self._moving[key] = (directory, 0)
        try:
            await plog.flush()
            copied = await asyncio.get_running_loop().run_in_executor(None, _copy_dir, plog.directory, future)
            self._moving[key] = (directory, copied)
            # From here to the swap nothing awaits: appends cannot interleave.
            plog.flush_sync()
            _copy_dir(plog.directory, future, only_changed=True)
            plog.close()
            final = directory / plog.directory.name
            future.rename(final)
            fsync_dir(directory)
            moved = PartitionLog(final, topic, partition, plog.settings, plog.recovery_point)
            moved.open()
            self.logs[key] = moved
            if holder is not None:
                holder.log = moved  # the Partition serving it
            old = plog.directory.with_name(f"{plog.directory.name}.{uuid.uuid4().hex[:8]}-delete")
            plog.directory.rename(old)
            asyncio.get_running_loop().run_in_executor(None, shutil.rmtree, old, True)
            self.write_recovery_checkpoint()
            log.info("%s-%d moved to %s (%d bytes)", topic, partition, directory, moved.size_bytes)
        except BaseException:
            shutil.rmtree(future, ignore_errors=True)
            plog.moving = False
            raise
        finally:
            self._moving.pop(key, None)

    def delete_partition(self, topic: str, partition: int) -> None:
        """Renames the partition directory away at once (atomic), then removes it off the event
        loop: unlinking a large log takes long enough to stall every other partition's requests.
        A crash in between leaves a `-delete` directory that the next start removes."""
        plog = self.logs.pop((topic, partition), None)
        if plog is None:
            return
        plog.close()
        target = plog.directory.with_name(f"{plog.directory.name}.{uuid.uuid4().hex[:8]}-delete")
        plog.directory.rename(target)
        try:
            asyncio.get_running_loop().run_in_executor(None, shutil.rmtree, target, True)
        except RuntimeError:  # no event loop (tools, tests): remove it here
            shutil.rmtree(target, ignore_errors=True)
        self._checkpoint_pending = True  # written by settle(), or before the next log is created

    # -- stray logs (ADR 0017) ------------------------------------------------------------------

    def set_aside(self, topic: str, partition: int, topic_id: str | None) -> Path | None:
        """Renames a log no recorded decision allows deleting to `<topic>-<partition>.<id>-stray`
        (Kafka 3.7's name for it), where it stays until `delete_stray`."""
        plog = self.logs.pop((topic, partition), None)
        if plog is None:
            return None
        plog.close()
        tag = (topic_id or "no-topic-id").replace("-", "")[:12] + uuid.uuid4().hex[:4]
        target = plog.directory.with_name(f"{plog.directory.name}.{tag}{strays.SUFFIX}")
        plog.directory.rename(target)
        fsync_dir(target.parent)
        if self._strays is not None:  # listed at once, not by rescanning every directory
            self._strays.extend(strays.find_in(target))
        self._checkpoint_pending = True
        return target

    def strays(self) -> list[tuple[str, Path, int]]:
        """(name, path, bytes) of every stray log directory, as last scanned: every heartbeat reports them,
        and scanning the log directories (a stat per partition) each time cost a broker with thousands of
        partitions a third of its idle CPU. A log set aside is added to the list as it goes, and a worker
        thread rescans every STRAY_RESCAN_S (a `dm strays delete` run beside it shows up then)."""
        if self._strays is None:
            self._strays = strays.find(self.dirs)
        return [(s.name, s.path, s.bytes) for s in self._strays]

    async def _rescan_strays(self) -> None:
        self._strays = await asyncio.to_thread(strays.find, self.dirs)
        self.check_open_files()

    # -- background work -------------------------------------------------------------------

    def start(self) -> None:
        c = self.config
        self._tasks = [
            asyncio.create_task(self._every(c["log.flush.scheduler.interval.ms"], self._flush_due)),
            asyncio.create_task(self._every(c["log.flush.offset.checkpoint.interval.ms"], self.checkpoint)),
            asyncio.create_task(self._every(c["log.retention.check.interval.ms"], self._retention)),
            asyncio.create_task(self._every(STRAY_RESCAN_S * 1000, self._rescan_strays)),
        ]
        self.cleaner.start()

    async def _every(self, interval_ms: int, job: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                result = job()
                if asyncio.iscoroutine(result):
                    await result
            except Exception as exc:
                dir_failure.check(exc)
                log.exception("background job %s failed", getattr(job, "__name__", job))

    async def _flush_due(self) -> None:
        for plog in list(self.logs.values()):
            if plog.flush_due():
                await plog.flush()

    async def checkpoint(self) -> None:
        """fsyncs every log and records how far each is durable, bounding recovery work. Producer-state
        snapshots are taken here (only of logs whose state changed) and written in a worker thread."""
        snapshots = []
        for plog in list(self.logs.values()):
            offset = plog.log_end_offset
            data = plog.producers.snapshot(offset)
            if data is not None:
                snapshots.append((plog.producers, offset, data, plog.producers.generation))
            await plog.flush()
        loop = asyncio.get_running_loop()
        if snapshots:
            await loop.run_in_executor(None, _write_snapshots, snapshots)
        await loop.run_in_executor(None, self.write_recovery_checkpoint)

    def write_recovery_checkpoint(self) -> None:
        self._checkpoint_pending = False
        offsets = {key: plog.recovery_point for key, plog in self.logs.items()}
        write_offsets(self.data_dir / RECOVERY_CHECKPOINT, offsets)

    def _retention(self) -> None:
        now = int(time.time() * 1000)
        expiration = self.config["producer.id.expiration.ms"]
        for plog in list(self.logs.values()):
            if plog.moving:
                continue
            plog.apply_retention()
            plog.producers.expire(now, expiration)

    async def close(self) -> None:
        await self.cleaner.close()
        await stop_tasks(*self._tasks)
        await asyncio.get_running_loop().run_in_executor(None, self._flush_all)
        # After a recovery stopped half-way, the checkpoint would forget the partitions not yet
        # opened: keep the old one, and do not claim a clean shutdown.
        complete = not self.abort_recovery.is_set()
        if complete:
            self.write_recovery_checkpoint()
        for plog in self.logs.values():
            plog.close()
        if complete:
            (self.data_dir / CLEAN_SHUTDOWN).touch()

    def _flush_all(self) -> None:
        """A clean shutdown makes every log durable (as Kafka's does), so that start-up trusts it
        without recovery. A broker with 10,000 new logs makes some 60,000 fsyncs: they run on
        SHUTDOWN_FLUSH_THREADS threads, since an fsync waits on the device and a file system commits
        concurrent ones together, and each log directory's entries are made durable once, not once
        per log (measured in docs/benchmarks.md: shutdown at 10,000 partitions)."""

        def flush_one(plog: PartitionLog) -> Path | None:
            plog.checkpoint_producers()
            return plog.directory.parent if plog.flush_sync(sync_parent=False) else None

        with ThreadPoolExecutor(SHUTDOWN_FLUSH_THREADS, thread_name_prefix="dm-shutdown-flush") as pool:
            parents = set(pool.map(flush_one, self.logs.values()))
        for parent in parents - {None}:
            fsync_dir(parent)

    def __iter__(self):
        return iter(self.logs.values())


