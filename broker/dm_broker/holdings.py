"""What a broker holds on its volume, and what it may do with it (ADR 0017).

- The metadata cache (`__dm_meta/topics-cache.json`): per topic its id, configs and every
  partition's replicas, as this broker last knew them; recovery reads the configs before the
  controller is reachable, and a controller that lost its state rebuilds topics from it.
- The report a broker registers with: the logs it holds (topic id, last leader epoch, offsets), that
  cache, and the end of the producer ids it was given or has seen.
- The fate of a log the metadata does not host here: deleted only on a decision the controller
  recorded (a tombstoned topic id, or a reassignment of the same topic that removed this replica),
  otherwise kept aside as stray.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from pathlib import Path

from .controller.models import ClusterMetadata, HeldPartition, HeldTopic, TopicDoc
from .log import dir_failure
from .log.checkpoints import atomic_write
from .log.partition_log import PartitionLog

log = logging.getLogger(__name__)

PARTITION_METADATA = "partition.metadata"
PRODUCER_IDS = "producer-ids.json"

HOST, DELETE, STRAY = "host", "delete", "stray"


def log_fate(disk_topic_id: str | None, index: int, topic: TopicDoc | None, node_id: int,
             tombstoned: set[str]) -> str:
    """What to do with a log of `topic`'s name and partition `index`, holding `disk_topic_id` (None:
    written before partition.metadata existed), given the metadata's `topic` of that name (None: the
    metadata has no such topic)."""
    same = topic is not None and disk_topic_id in (None, topic.topic_id)
    if same and index < len(topic.partitions) and node_id in topic.partitions[index].replicas:
        return HOST
    if same and disk_topic_id is not None and index < len(topic.partitions):
        return DELETE  # the same topic, reassigned away from this broker: a recorded decision
    if disk_topic_id is not None and disk_topic_id in tombstoned:
        return DELETE  # that topic was deleted, and the controller recorded it
    return STRAY


def disk_topic_id(plog: PartitionLog) -> str | None:
    if plog.written_topic_id is not None:  # written by this process: no read on the event loop
        return plog.written_topic_id
    try:
        text = (plog.directory / PARTITION_METADATA).read_text().strip()
    except FileNotFoundError:
        return None
    try:
        return str(uuid.UUID(text))
    except ValueError:
        # Empty or torn: written without an fsync when the log was created, and a flush fsyncs it before
        # any record, so such a log holds no durable record (ADR 0033); as a log without the file.
        if text:
            log.warning("%s: unreadable topic id %r, taken as none", plog.directory / PARTITION_METADATA, text[:40])
        return None


def tombstones(md: ClusterMetadata) -> set[str]:
    return {t.topic_id for t in md.deleted_topics}


# -- the metadata cache ------------------------------------------------------------------------------


def read_cache(path: Path) -> dict[str, HeldTopic]:
    """The cache; a cache from before topic ids were kept (name -> configs) gives configs only."""
    try:
        raw = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    cache = {}
    for name, entry in raw.items():
        if isinstance(entry, dict) and "topic_id" in entry:
            cache[name] = HeldTopic.model_validate(entry)
        elif isinstance(entry, dict):
            cache[name] = HeldTopic(topic_id="", configs={k: str(v) for k, v in entry.items()})
    return cache


def cache_of(md: ClusterMetadata) -> dict[str, HeldTopic]:
    return {name: HeldTopic(topic_id=t.topic_id, configs=dict(t.configs), replicas=[p.replicas for p in t.partitions],
                            partition_epochs=[p.partition_epoch for p in t.partitions],
                            partition_count=len(t.partitions))
            for name, t in md.topics.items()}


class CacheWriter:
    """Keeps the cache in step with the metadata: written when a topic id, configs or an assignment
    changed (not for ISR-only changes, which are frequent and which recovery does not need). What was
    last written is kept in memory and only the topics whose document changed are looked at: at 10,000
    partitions reading the file back and comparing every topic took tens of milliseconds of the event
    loop at every metadata update. The file is written (with its fsyncs) in an I/O thread, the latest
    metadata winning; close() waits for the last write. A crash in between leaves the previous cache,
    which recovery reads only for topic settings and the topics it reports holding (the logs and their
    partition.metadata are what decide a log's fate)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._topics: dict[str, TopicDoc] = {}  # the documents the shapes below were taken from
        self._shapes: dict[str, tuple[str, dict[str, str], list[list[int]]]] | None = None
        self._pending: ClusterMetadata | None = None
        self._writer: asyncio.Task[None] | None = None

    def update(self, md: ClusterMetadata) -> None:
        if self._shapes is None:
            self._shapes = {n: (t.topic_id, t.configs, t.replicas) for n, t in read_cache(self.path).items()}
        known, seen = self._shapes, self._topics
        shapes = {n: known[n] if seen.get(n) is t and n in known else
                  (t.topic_id, dict(t.configs), [p.replicas for p in t.partitions]) for n, t in md.topics.items()}
        changed = shapes != known
        self._shapes, self._topics = shapes, dict(md.topics)
        if not changed:
            return
        self._pending = md
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_pending())

    async def _write_pending(self) -> None:
        while self._pending is not None:
            md, self._pending = self._pending, None
            try:
                await asyncio.to_thread(self._write, md)
            except OSError as exc:  # the next change writes it again; the broker carries on, unless the disk failed
                dir_failure.check(exc, self.path.parent.parent)
                log.warning("writing %s failed: %s", self.path, exc)

    def _write(self, md: ClusterMetadata) -> None:
        atomic_write(self.path, json.dumps({n: t.model_dump() for n, t in cache_of(md).items()}).encode())

    async def close(self) -> None:
        if self._writer is not None:
            await self._writer


# -- the report -----------------------------------------------------------------------------------------


def holdings(logs: dict[tuple[str, int], PartitionLog]) -> list[HeldPartition]:
    return [held(plog) for _, plog in sorted(logs.items())]


def held(plog: PartitionLog) -> HeldPartition:
    return HeldPartition(topic=plog.topic, partition=plog.partition, topic_id=disk_topic_id(plog),
                         last_leader_epoch=plog.leader_epochs.latest_epoch, log_end_offset=plog.log_end_offset,
                         log_start_offset=plog.log_start_offset)


def read_producer_id_end(meta_dir: Path) -> int:
    try:
        return int(json.loads((meta_dir / PRODUCER_IDS).read_text())["end"])
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return 0


def record_producer_id_end(meta_dir: Path, end: int) -> None:
    """Durably, before any id below `end` is handed out: a controller that lost its state resumes
    above every id a broker may have given."""
    atomic_write(meta_dir / PRODUCER_IDS, json.dumps({"end": end}).encode())


def producer_id_end(meta_dir: Path, logs: dict[tuple[str, int], PartitionLog]) -> int:
    seen = max((pid for plog in logs.values() for pid in plog.producers.producers), default=-1)
    return max(read_producer_id_end(meta_dir), seen + 1)
