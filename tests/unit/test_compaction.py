from __future__ import annotations

import json
import time
from pathlib import Path

from dm_broker.config import BrokerConfig, TopicSettings
from dm_broker.log.compaction import SWAP_MARKER, LogCleaner, finish_interrupted_swap
from dm_broker.log.partition_log import PartitionLog
from dm_broker.log.records import build_batch, decode_records, iter_batches, validate_batches


def make_log(path: Path, **configs: str) -> PartitionLog:
    settings = TopicSettings(BrokerConfig.build({}, environ={}),
                             {"cleanup.policy": "compact", "segment.bytes": "1024", **configs})
    plog = PartitionLog(path, "c", 0, settings)
    plog.open()
    return plog


def put(plog: PartitionLog, key: bytes, value: bytes | None, ts: int | None = None) -> int:
    data = bytearray(build_batch([(key, value, [])], timestamp_ms=ts or int(time.time() * 1000)))
    return plog.append(data, validate_batches(data, 1 << 20), 0).base_offset


def contents(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for batch in plog.read_batches(plog.log_start_offset, plog.log_end_offset, 1 << 62):
        out += [(r.offset, r.key, r.value) for r in decode_records(batch)]
    return out


async def test_keeps_latest_value_per_key_and_offsets(tmp_path):
    plog = make_log(tmp_path / "c-0")
    last_offsets = {}
    for round_ in range(5):
        for k in range(10):
            last_offsets[k] = put(plog, b"k%d" % k, b"v%d-%d" % (k, round_) + b"." * 40)
    end = plog.log_end_offset
    segments_before = len(plog.segments)
    cleaner = LogCleaner({("c", 0): plog}, 1000)
    assert cleaner.needs_cleaning(("c", 0), plog)
    result = await cleaner.clean(("c", 0), plog)
    assert result is not None and result.records_removed > 0
    assert len(plog.segments) < segments_before
    offsets = [offset for offset, _, _ in contents(plog)]
    assert offsets == sorted(set(offsets))
    # every key's last value survives, at its original offset
    rows = {key: (offset, value) for offset, key, value in contents(plog)}
    for k in range(10):
        offset, value = rows[b"k%d" % k]
        assert value.startswith(b"v%d-4" % k)
        assert offset == last_offsets[k]
    assert plog.log_end_offset == end
    assert put(plog, b"new", b"x") == end  # appends continue after the kept offsets
    # reading from an offset that was compacted away starts at the next kept record
    result = plog.read(1, 1 << 20, plog.log_end_offset, True)
    data = b"".join(s.read() for s in result.slices)
    first = next(iter_batches(data))[1]
    assert first.base_offset >= 1
    assert not cleaner.needs_cleaning(("c", 0), plog)


async def test_tombstones_survive_until_delete_retention(tmp_path):
    plog = make_log(tmp_path / "c-0", **{"delete.retention.ms": "60000"})
    old = int(time.time() * 1000) - 3_600_000
    put(plog, b"gone-old", b"v", ts=old)
    put(plog, b"gone-old", None, ts=old)  # tombstone older than the horizon: dropped
    put(plog, b"gone-new", b"v")
    put(plog, b"gone-new", None)  # recent tombstone: kept so consumers see the delete
    for i in range(30):
        put(plog, b"filler-%d" % (i % 3), b"." * 60)
    await LogCleaner({("c", 0): plog}, 1000).clean(("c", 0), plog)
    keys = {key: value for _, key, value in contents(plog)}
    assert b"gone-old" not in keys
    assert b"gone-new" in keys and keys[b"gone-new"] is None


async def test_interrupted_swap_rolls_forward_on_open(tmp_path):
    plog = make_log(tmp_path / "c-0")
    for i in range(40):
        put(plog, b"k%d" % (i % 4), b"v%d" % i + b"." * 50)
    expected_latest = {b"k%d" % k: b"v%d" % (36 + k) for k in range(4)}
    plog.close()
    # simulate a crash right after the marker was written: cleaned file present, old ones too
    directory = tmp_path / "c-0"
    olds = sorted(int(p.stem) for p in directory.glob("*.log"))[:-1]
    reopened = make_log(directory)
    closed = reopened.segments[:-1]
    from dm_broker.log.compaction import _build_cleaned_files

    outputs, _ = _build_cleaned_files(reopened, closed, reopened.log_end_offset, 0, 1024)
    reopened.close()
    (directory / SWAP_MARKER).write_text(json.dumps({"outputs": [[p.name, b] for p, b in outputs],
                                                     "replaced": olds}))
    finish_interrupted_swap(directory)
    assert not (directory / SWAP_MARKER).exists()
    assert not list(directory.glob("*.cleaned"))
    after = make_log(directory)
    rows = {key: value for _, key, value in contents(after)}
    assert {k: v[: len(expected_latest[k])] for k, v in rows.items()} == expected_latest
    offsets = [o for o, _, _ in contents(after)]
    assert offsets == sorted(offsets) and len(offsets) == len(set(offsets))


async def test_uncommitted_swap_is_dropped(tmp_path):
    plog = make_log(tmp_path / "c-0")
    for i in range(20):
        put(plog, b"k", b"v%d" % i + b"." * 60)
    before = contents(plog)
    plog.close()
    (tmp_path / "c-0" / "00000000000000000000.log.cleaned").write_bytes(b"partial")
    again = make_log(tmp_path / "c-0")
    assert contents(again) == before


async def test_transactions_are_compacted_as_kafka_does(tmp_path):
    from dm_broker.log.records import TRANSACTIONAL_BIT, build_marker_batch, parse_header

    plog = make_log(tmp_path / "c-0", **{"delete.retention.ms": "1000"})
    old = int(time.time() * 1000) - 60_000

    def txn_put(pid: int, seq: int, key: bytes, value: bytes) -> int:
        data = bytearray(build_batch([(key, value + b"." * 100, [])], timestamp_ms=old, producer_id=pid,
                                     producer_epoch=0, base_sequence=seq, attributes_extra=TRANSACTIONAL_BIT))
        return plog.append(data, validate_batches(data, 1 << 20), 0).base_offset

    def marker(pid: int, committed: bool) -> int:
        data = bytearray(build_marker_batch(pid, 0, committed, 0, old))
        return plog.append(data, validate_batches(data, 1 << 20), 0).base_offset

    txn_put(1, 0, b"a", b"committed-a")
    txn_put(1, 1, b"b", b"committed-b")
    marker(1, committed=True)
    txn_put(2, 0, b"a", b"aborted-a")  # newer than the committed value: it must not shadow it
    marker(2, committed=False)
    txn_put(3, 0, b"b", b"committed-b2")  # supersedes b: the first transaction keeps one record (a)
    marker(3, committed=True)
    for i in range(12):  # enough plain records to close the segments above
        put(plog, b"filler-%d" % i, b"x" * 100)
    open_at = txn_put(4, 0, b"a", b"open-a")  # an open transaction: nothing from here on is cleaned
    put(plog, b"after-open", b"x" * 100)
    cleaner = LogCleaner({("c", 0): plog}, 1000)
    await cleaner.clean(("c", 0), plog)
    rows = contents(plog)
    values = {value[:14] for _, _, value in rows if value}
    assert any(v.startswith(b"committed-a") for v in values) and any(v.startswith(b"committed-b2") for v in values)
    assert not any(v.startswith(b"aborted-a") for v in values)
    assert any(v.startswith(b"open-a") for v in values) and open_at in {o for o, _, _ in rows}
    batches = [parse_header(b) for b in plog.read_batches(plog.log_start_offset, plog.log_end_offset, 1 << 62)]
    markers = {h.producer_id for h in batches if h.is_control}
    # The aborted transaction's marker and the fully superseded one's are gone (old enough); the first
    # commit still has a record (a), so its marker stays.
    assert 1 in markers and 2 not in markers and 3 in markers


async def test_min_compaction_lag_keeps_young_records_and_what_they_would_hide(tmp_path):
    """min.compaction.lag.ms: a segment with a record younger than the lag is not cleaned, and its
    records do not yet make older values obsolete; once old enough, they do."""
    hour = 3_600_000
    now = int(time.time() * 1000)
    plog = make_log(tmp_path / "c-0", **{"min.compaction.lag.ms": str(hour)})
    filler = b"." * 300
    for i in range(6):  # old values of k, over several segments
        put(plog, b"k", b"old-%d" % i + filler, ts=now - 3 * hour)
    put(plog, b"k", b"young" + filler, ts=now)  # a young value in a later segment
    for i in range(4):
        put(plog, b"other-%d" % i, filler, ts=now)
    cleaner = LogCleaner({("c", 0): plog}, 1000)
    await cleaner.clean(("c", 0), plog)
    values = [v for _, k, v in contents(plog) if k == b"k"]
    # the young value hides nothing yet: the newest old value survives beside it
    assert values[-2].startswith(b"old-5") and values[-1].startswith(b"young")
    assert all(not v.startswith(b"old-0") for v in values)  # old ones still compact among themselves
    plog.settings = TopicSettings(BrokerConfig.build({}, environ={}),
                                  {"cleanup.policy": "compact", "segment.bytes": "1024"})
    await cleaner.clean(("c", 0), plog)
    assert [v for _, k, v in contents(plog) if k == b"k"] == [b"young" + filler]


def test_max_compaction_lag_cleans_a_log_below_the_dirty_ratio(tmp_path):
    now = int(time.time() * 1000)
    plog = make_log(tmp_path / "c-0", **{"min.cleanable.dirty.ratio": "1.0", "max.compaction.lag.ms": "60000"})
    for i in range(8):
        put(plog, b"k%d" % i, b"." * 300, ts=now - 120_000)
    cleaner = LogCleaner({("c", 0): plog}, 1000)
    cleaner.cleaned_upto[("c", 0)] = plog.segments[1].base_offset  # only part of the log is dirty
    assert cleaner.needs_cleaning(("c", 0), plog, now_ms=now)
    assert not cleaner.needs_cleaning(("c", 0), plog, now_ms=now - 100_000)  # not yet over the lag


def test_max_compaction_lag_rolls_the_active_segment(tmp_path):
    plog = make_log(tmp_path / "c-0", **{"max.compaction.lag.ms": "60000", "segment.bytes": str(1 << 20)})
    start = int(time.time() * 1000) - 600_000
    put(plog, b"a", b"1", ts=start)
    put(plog, b"b", b"2", ts=start + 30_000)
    assert len(plog.segments) == 1
    put(plog, b"c", b"3", ts=start + 90_000)  # the active segment is older than the lag: rolled first
    assert len(plog.segments) == 2


async def test_a_log_deleted_while_its_cleaned_files_are_built_is_not_written_again(tmp_path, monkeypatch):
    """The topic is deleted (its log closed, its directory renamed away, as LogManager.delete_partition does)
    while the cleaner's thread builds the cleaned files: the swap is dropped, so its marker does not create
    the deleted log's directory again. The thread is held until the deletion (a timing only a hold makes
    certain)."""
    import asyncio
    import threading

    from dm_broker.log import compaction

    plog = make_log(tmp_path / "c-0")
    for i in range(40):
        put(plog, b"k%d" % (i % 4), b"v%d" % i + b"." * 50)
    built, go = threading.Event(), threading.Event()
    real_build = compaction._build_cleaned_files

    def held(*args: object) -> object:
        plan = real_build(*args)
        built.set()
        go.wait(10)
        return plan

    monkeypatch.setattr(compaction, "_build_cleaned_files", held)
    cleaning = asyncio.create_task(LogCleaner({("c", 0): plog}, 1000).clean(("c", 0), plog))
    assert await asyncio.to_thread(built.wait, 10)
    plog.close()
    plog.directory.rename(tmp_path / "c-0.0123abcd-delete")
    go.set()
    assert await cleaning is None
    assert not (tmp_path / "c-0").exists()
