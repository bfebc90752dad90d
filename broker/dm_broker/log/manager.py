"""All partition logs of a broker and the background work on them: time-based flush,
recovery-point checkpoints, producer-state snapshots and retention."""

from __future__ import annotations

import asyncio
import logging
import shutil
import threading
import time
import uuid
from collections.abc import Callable

from ..config import BrokerConfig, TopicSettings
from ..tasks import stop_tasks
from .checkpoints import read_offsets, write_offsets
from .compaction import LogCleaner
from .partition_log import PartitionLog

log = logging.getLogger(__name__)

RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"
CLEAN_SHUTDOWN = ".dm_cleanshutdown"


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
        self.data_dir = config.data_dir
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.recovery_seconds = 0.0
        self.cleaner = LogCleaner(self.logs, config["log.cleaner.backoff.ms"], config["log.cleaner.enable"])
        self.previous_shutdown = "clean"  # clean | unclean | none (a new data directory)
        self.abort_recovery = threading.Event()

    def open_all(self, settings_for: Callable[[str], TopicSettings | None]) -> None:
        """Opens every partition directory (controller metadata later says which to keep)."""
        start = time.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        marker = self.data_dir / CLEAN_SHUTDOWN
        entries = sorted(self.data_dir.iterdir())
        has_logs = any(p.is_dir() and parse_partition_dir(p.name) for p in entries)
        if marker.exists():
            self.previous_shutdown = "clean"
        elif not has_logs and not (self.data_dir / RECOVERY_CHECKPOINT).exists():
            self.previous_shutdown = "none (new data directory)"
        else:
            self.previous_shutdown = "unclean"
        marker.unlink(missing_ok=True)
        recovery = read_offsets(self.data_dir / RECOVERY_CHECKPOINT)
        for path in entries:
            if self.abort_recovery.is_set():
                raise RecoveryAborted
            if path.name.endswith("-delete") and path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
                continue
            parsed = parse_partition_dir(path.name) if path.is_dir() else None
            if parsed is None:
                continue
            settings = settings_for(parsed[0])
            if settings is None:
                log.warning("ignoring %s: topic is not in the metadata", path)
                continue
            plog = PartitionLog(path, parsed[0], parsed[1], settings, recovery.get(parsed, 0))
            plog.open()
            self.logs[parsed] = plog
        self.recovery_seconds = time.monotonic() - start

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def create(self, topic: str, partition: int, settings: TopicSettings) -> PartitionLog:
        existing = self.logs.get((topic, partition))
        if existing is not None:
            return existing
        plog = PartitionLog(self.data_dir / f"{topic}-{partition}", topic, partition, settings)
        plog.open()
        self.logs[(topic, partition)] = plog
        return plog

    def delete_partition(self, topic: str, partition: int) -> None:
        """Renames the partition directory away at once (atomic), then removes it."""
        plog = self.logs.pop((topic, partition), None)
        if plog is None:
            return
        plog.close()
        target = plog.directory.with_name(f"{plog.directory.name}.{uuid.uuid4().hex[:8]}-delete")
        plog.directory.rename(target)
        shutil.rmtree(target, ignore_errors=True)
        self.write_recovery_checkpoint()

    # -- background work -------------------------------------------------------------------

    def start(self) -> None:
        c = self.config
        self._tasks = [
            asyncio.create_task(self._every(c["log.flush.scheduler.interval.ms"], self._flush_due)),
            asyncio.create_task(self._every(c["log.flush.offset.checkpoint.interval.ms"], self.checkpoint)),
            asyncio.create_task(self._every(c["log.retention.check.interval.ms"], self._retention)),
        ]
        self.cleaner.start()

    async def _every(self, interval_ms: int, job: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                result = job()
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("background job %s failed", getattr(job, "__name__", job))

    async def _flush_due(self) -> None:
        for plog in list(self.logs.values()):
            if plog.flush_due():
                await plog.flush()

    async def checkpoint(self) -> None:
        """fsyncs every log and records how far each is durable, bounding recovery work."""
        for plog in list(self.logs.values()):
            plog.checkpoint_producers()
            await plog.flush()
        await asyncio.get_running_loop().run_in_executor(None, self.write_recovery_checkpoint)

    def write_recovery_checkpoint(self) -> None:
        offsets = {key: plog.recovery_point for key, plog in self.logs.items()}
        write_offsets(self.data_dir / RECOVERY_CHECKPOINT, offsets)

    def _retention(self) -> None:
        now = int(time.time() * 1000)
        expiration = self.config["producer.id.expiration.ms"]
        for plog in list(self.logs.values()):
            plog.apply_retention()
            plog.producers.expire(now, expiration)

    async def close(self) -> None:
        await self.cleaner.close()
        await stop_tasks(*self._tasks)
        for plog in self.logs.values():
            plog.checkpoint_producers()
            plog.flush_sync()
        # After a recovery stopped half-way, the checkpoint would forget the partitions not yet
        # opened: keep the old one, and do not claim a clean shutdown.
        complete = not self.abort_recovery.is_set()
        if complete:
            self.write_recovery_checkpoint()
        for plog in self.logs.values():
            plog.close()
        if complete:
            (self.data_dir / CLEAN_SHUTDOWN).touch()

    def __iter__(self):
        return iter(self.logs.values())


