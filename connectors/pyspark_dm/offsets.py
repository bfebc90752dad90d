"""Which partitions a query reads and the offsets it reads between (driver side).

Offsets travel through Spark (and its checkpoints) as Spark's Kafka source writes them:
{"topic": {"0": 23, "1": 40}}.
"""

from __future__ import annotations

import itertools
import logging
import math

from .errors import DmSourceError
from .options import OffsetSpec, ReadOptions
from .wire import EARLIEST, LATEST, DmClient, TopicPartition

log = logging.getLogger("pyspark_dm")
Offsets = dict[TopicPartition, int]


def to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(data: dict[str, dict[str, int]] | None) -> Offsets:
    return {(topic, int(p)): int(o) for topic, parts in (data or {}).items() for p, o in parts.items()}


def discover(client: DmClient, opts: ReadOptions) -> list[TopicPartition]:
    """The partitions the query reads now. Named topics must exist; a pattern may match none yet."""
    if opts.subscribe_pattern is not None:
        meta = client.metadata(None)
        topics = opts.topics_wanted(list(meta.topics))
    else:
        topics = opts.topics_wanted([])
        meta = client.metadata(topics)
        option = "assign" if opts.assign is not None else "subscribe"
        missing = [t for t in topics if t not in meta.topics]
        if missing:
            why = "; ".join(f"{t}: {meta.topic_errors[t].name}" for t in missing if t in meta.topic_errors)
            detail = f" ({why})" if why else ""
            raise DmSourceError(f"option {option}: unknown topic(s) {', '.join(missing)}{detail}")
    found = [(t, p) for t in topics for p in sorted(meta.topics.get(t, {}))]
    if opts.assign is not None:
        wanted = [(t, p) for t, ps in opts.assign.items() for p in ps]
        absent = [f"{t}-{p}" for t, p in wanted if (t, p) not in found]
        if absent:
            raise DmSourceError(f"option assign: no such partition(s) {', '.join(absent)}")
        return sorted(wanted)
    return found


def resolve(client: DmClient, partitions: list[TopicPartition], spec: OffsetSpec, timestamp: int | None,
            option: str, strategy: str = "error") -> Offsets:
    """Concrete offsets for `partitions` from 'earliest'/'latest', a JSON spec or a timestamp."""
    if not partitions:
        return {}
    if timestamp is not None:
        found = client.list_offsets({tp: timestamp for tp in partitions})
        missing = [tp for tp, o in found.items() if o < 0]
        if missing and strategy == "error":
            names = ", ".join(f"{t}-{p}" for t, p in missing)
            raise DmSourceError(f"option {option}: no record at or after timestamp {timestamp} in {names} "
                                "(set startingOffsetsByTimestampStrategy=latest to start at the end instead)")
        if missing:
            found.update(client.list_offsets(dict.fromkeys(missing, LATEST)))
        return found
    if isinstance(spec, str):
        return client.list_offsets(dict.fromkeys(partitions, EARLIEST if spec == "earliest" else LATEST))
    wanted = {(t, p): o for t, parts in spec.items() for p, o in parts.items()}
    absent = [f"{t}-{p}" for t, p in partitions if (t, p) not in wanted]
    if absent:
        raise DmSourceError(f"option {option}: give an offset for every partition read (-2 earliest, -1 latest); "
                            f"missing {', '.join(absent)}")
    extra = [f"{t}-{p}" for t, p in wanted if (t, p) not in set(partitions)]
    if extra:
        raise DmSourceError(f"option {option}: {', '.join(extra)} is not a partition of the topics read")
    symbolic = {tp: o for tp, o in wanted.items() if o < 0}
    resolved = client.list_offsets(symbolic) if symbolic else {}
    return {tp: resolved.get(tp, o) for tp, o in wanted.items()}


def rate_limit(start: Offsets, latest: Offsets, limit: int) -> Offsets:
    """At most `limit` records in total, shared in proportion to what each partition has waiting
    (Spark's Kafka source rule, so trigger sizes match what users know)."""
    sizes = {tp: max(latest[tp] - start.get(tp, latest[tp]), 0) for tp in latest}
    total = sum(sizes.values())
    if total <= limit:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        begin = start.get(tp, end)
        share = limit * sizes[tp] / total
        out[tp] = min(begin + (math.ceil(share) if share < 1 else math.floor(share)), end)
    return out


def split(ranges: list[tuple[TopicPartition, int, int]], min_partitions: int | None
          ) -> list[tuple[TopicPartition, int, int]]:
    """Offset ranges cut so there are at least `min_partitions` Spark partitions, bigger ranges
    cut into more pieces."""
    ranges = [r for r in ranges if r[2] > r[1]]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(end - start for _, start, end in ranges)
    out = []
    for tp, start, end in ranges:
        pieces = max(1, min(end - start, round(min_partitions * (end - start) / total)))
        step = (end - start) / pieces
        bounds = [start + round(i * step) for i in range(pieces)] + [end]
        out.extend((tp, a, b) for a, b in itertools.pairwise(bounds) if b > a)
    return out


def check_lost(tp: TopicPartition, wanted: int, earliest: int, fail: bool) -> int:
    """The offset to read from when `wanted` may have been deleted by retention already."""
    if wanted >= earliest:
        return wanted
    message = (f"{tp[0]}-{tp[1]}: offsets {wanted}..{earliest - 1} were deleted (retention) before they were read")
    if fail:
        raise DmSourceError(message + "; set failOnDataLoss=false to skip them")
    log.warning("%s; skipping them (failOnDataLoss=false)", message)
    return earliest
