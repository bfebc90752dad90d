"""Executor side: read one offset range from its partition leader as Arrow batches."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from kio.schema.errors import ErrorCode
from pyspark.sql.datasource import InputPartition

from .decode import decode_records
from .errors import DmSourceError
from .offsets import check_lost
from .wire import EARLIEST, DmClient

log = logging.getLogger("pyspark_dm")


@dataclass
class OffsetRange(InputPartition):
    """[start, end) of one topic partition; what a Spark task reads. Pickled to executors."""

    topic: str
    partition: int
    start: int
    end: int
    bootstrap: str
    include_headers: bool
    fail_on_data_loss: bool
    fetch_max_bytes: int
    timeout_s: float
    read_committed: bool = False
    client_config: dict[str, str] = field(default_factory=dict)  # TLS/SASL (options.client_config)


def read_range(r: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Fetches [start, end) from the leader, following leader moves, one Arrow batch per fetch."""
    tp = (r.topic, r.partition)
    pos = r.start
    with DmClient(r.bootstrap, timeout=r.timeout_s, read_committed=r.read_committed,
                  client_config=r.client_config) as client:
        stalled_since: float | None = None
        while pos < r.end:
            res = client.fetch(r.topic, r.partition, pos, r.fetch_max_bytes)
            if res.error == ErrorCode.offset_out_of_range:
                earliest = client.list_offsets({tp: EARLIEST})[tp]
                if pos < earliest:
                    pos = check_lost(tp, pos, earliest, r.fail_on_data_loss)
                    continue
                _lost_tail(tp, pos, r.end, r.fail_on_data_loss)
                return
            if res.error == ErrorCode.unknown_topic_or_partition:
                if r.fail_on_data_loss:
                    raise DmSourceError(f"{r.topic}-{r.partition} no longer exists; offsets {pos}..{r.end - 1} "
                                        "were not read (set failOnDataLoss=false to skip them)")
                log.warning("%s-%d no longer exists; skipping offsets %d..%d", *tp, pos, r.end - 1)
                return
            if res.error != ErrorCode.none:
                raise DmSourceError(f"fetching {r.topic}-{r.partition} at offset {pos}: {res.error.name}")
            decoded = decode_records(res.records, r.topic, r.partition, pos, r.end, r.include_headers, res.aborted)
            if decoded.batch.num_rows:
                yield decoded.batch
            if decoded.next_offset > pos:
                pos = decoded.next_offset
                stalled_since = None
                continue
            # Nothing at pos although the query planned up to `end`: a new leader's high watermark
            # can trail briefly after a failover; past the client timeout the records are gone.
            stalled_since = stalled_since or time.monotonic()
            if time.monotonic() - stalled_since > r.timeout_s:
                _lost_tail(tp, pos, r.end, r.fail_on_data_loss)
                return
            time.sleep(0.1)


def _lost_tail(tp: tuple[str, int], pos: int, end: int, fail: bool) -> None:
    message = f"{tp[0]}-{tp[1]}: offsets {pos}..{end - 1} planned for this batch are no longer in the log"
    if fail:
        raise DmSourceError(message + " (set failOnDataLoss=false to skip them)")
    log.warning("%s; skipping them", message)
