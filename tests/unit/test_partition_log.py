from __future__ import annotations

import os
from pathlib import Path

import pytest
from dm_broker.config import BrokerConfig, TopicSettings
from dm_broker.log.partition_log import PartitionLog
from dm_broker.log.records import build_batch, decode_records, validate_batches


def settings(**overrides: str) -> TopicSettings:
    return TopicSettings(BrokerConfig.build({"log.index.interval.bytes": 200}, environ={}), overrides)


def append(plog: PartitionLog, value: bytes, ts: int = 1_000, producer: tuple[int, int, int] | None = None):
    pid, epoch, seq = producer or (-1, -1, -1)
    data = bytearray(build_batch([(None, value, [])], timestamp_ms=ts, producer_id=pid, producer_epoch=epoch,
                                 base_sequence=seq))
    return plog.append(data, validate_batches(data, 1 << 20), 0)


def values(plog: PartitionLog, offset: int = 0) -> list[bytes]:
    result = plog.read(offset, 1 << 30, plog.log_end_offset, True)
    data = b"".join(s.read() for s in result.slices)
    from dm_broker.log.records import iter_batches

    return [r.value for pos, h in iter_batches(data) for r in decode_records(data[pos : pos + h.size])]


@pytest.fixture
def plog(tmp_path: Path) -> PartitionLog:
    log = PartitionLog(tmp_path / "t-0", "t", 0, settings(**{"segment.bytes": "1024"}))
    log.open()
    return log


def test_append_read_roll(plog):
    for i in range(40):
        result = append(plog, b"v%03d" % i + b"." * 60, ts=1_000 + i)
        assert result.base_offset == i
    assert plog.log_end_offset == 40
    assert len(plog.segments) > 3
    assert all(s.size <= 1024 for s in plog.segments)
    assert values(plog, 17)[0].startswith(b"v017")
    assert len(values(plog)) == 40


def test_read_respects_max_bytes_but_returns_first_batch(plog):
    for _ in range(5):
        append(plog, b"x" * 300)
    result = plog.read(0, 10, plog.log_end_offset, min_one_batch=True)
    assert result.size > 300  # KIP-74: the first batch is returned whole
    assert plog.read(0, 10, plog.log_end_offset, min_one_batch=False).size == 10
    assert plog.read(2, 1 << 20, 2, True).size == 0  # nothing at or past max_offset


def test_offset_for_timestamp(plog):
    for i in range(20):
        append(plog, b"%d" % i, ts=10_000 + i * 100)
    assert plog.offset_for_timestamp(10_550) == (6, 10_600)
    assert plog.offset_for_timestamp(0) == (0, 10_000)
    assert plog.offset_for_timestamp(99_999) is None
    assert plog.max_timestamp_offset(plog.log_end_offset) == (19, 11_900)
    assert plog.max_timestamp_offset(10) == (9, 10_900), "only below the limit (the high watermark)"


def test_max_timestamp_is_the_records_offset_not_its_batchs_last(plog):
    """KAFKA-16310: the record with the highest timestamp in the middle of a batch."""
    append(plog, b"first", ts=5_000)
    data = bytearray(build_batch([(None, b"a", []), (None, b"peak", []), (None, b"c", [])], timestamp_ms=6_000,
                                 timestamp_deltas=[0, 900, 10]))
    plog.append(data, validate_batches(data, 1 << 20), 0)
    append(plog, b"later", ts=6_500)
    assert plog.max_timestamp_offset(plog.log_end_offset) == (2, 6_900)


def test_log_start_moves_inside_a_segment_and_survives_reopening(tmp_path):
    log = PartitionLog(tmp_path / "t-0", "t", 0, settings(**{"segment.bytes": "1024"}))
    log.open()
    for i in range(40):
        append(log, b"v%03d" % i + b"." * 60)
    segments = len(log.segments)
    assert log.advance_start(25) == 25
    assert log.log_start_offset == 25 and len(log.segments) < segments
    assert log.segments[0].base_offset <= 25
    assert log.advance_start(10) == 25, "never moves back"
    log.close()
    again = PartitionLog(tmp_path / "t-0", "t", 0, settings(**{"segment.bytes": "1024"}))
    again.open()
    assert again.log_start_offset == 25


def test_recovery_truncates_torn_tail_and_reopens(tmp_path):
    log = PartitionLog(tmp_path / "t-0", "t", 0, settings())
    log.open()
    for i in range(10):
        append(log, b"%d" % i)
    log.close()
    seg = next((tmp_path / "t-0").glob("*.log"))
    os.truncate(seg, seg.stat().st_size - 3)
    again = PartitionLog(tmp_path / "t-0", "t", 0, settings())
    again.open()
    assert again.log_end_offset == 9
    assert again.truncated_bytes_on_recovery > 0
    assert append(again, b"next").base_offset == 9


def test_recovery_point_skips_rescanning_old_segments(tmp_path):
    log = PartitionLog(tmp_path / "t-0", "t", 0, settings(**{"segment.bytes": "1024"}))
    log.open()
    for i in range(40):
        append(log, b"%03d" % i + b"." * 60)
    log.flush_sync()
    end = log.recovery_point
    first = log.segments[0].path
    log.close()
    # damage an old, checkpointed segment: trusted, so not rescanned (only the tail is)
    with first.open("r+b") as fh:
        fh.seek(30)
        fh.write(b"\xff")
    again = PartitionLog(tmp_path / "t-0", "t", 0, settings(**{"segment.bytes": "1024"}), recovery_point=end)
    again.open()
    assert again.log_end_offset == 40
    # without the checkpoint the damage is found and everything after it is dropped
    again.close()
    fresh = PartitionLog(tmp_path / "t-0", "t", 0, settings(**{"segment.bytes": "1024"}), recovery_point=0)
    fresh.open()
    assert fresh.log_end_offset == 0


def test_retention_by_size_and_time(tmp_path):
    log = PartitionLog(tmp_path / "t-0", "t", 0, settings(**{"segment.bytes": "1024", "retention.bytes": "2048"}),
                       clock=lambda: 10_000_000)
    log.open()
    for i in range(40):
        append(log, b"%03d" % i + b"." * 60, ts=9_000_000)
    deleted = log.apply_retention()
    assert deleted > 0
    assert sum(s.size for s in log.segments[:-1]) <= 2048
    assert log.log_start_offset == log.segments[0].base_offset > 0
    log.settings = settings(**{"segment.bytes": "1024", "retention.ms": "1000"})
    log.apply_retention()
    assert log.log_start_offset == log.log_end_offset == 40  # everything expired, active segment rolled


def test_producer_state_survives_reopen(tmp_path):
    log = PartitionLog(tmp_path / "t-0", "t", 0, settings())
    log.open()
    for seq in range(3):
        append(log, b"%d" % seq, producer=(5, 0, seq))
    log.checkpoint_producers()
    append(log, b"3", producer=(5, 0, 3))  # after the snapshot: replayed from the log
    log.close()
    again = PartitionLog(tmp_path / "t-0", "t", 0, settings())
    again.open()
    from dm_broker.log.records import parse_header

    retry = build_batch([(None, b"3", [])], timestamp_ms=1, producer_id=5, producer_epoch=0, base_sequence=3)
    cached = again.check_duplicate(parse_header(retry))
    assert cached is not None and cached.first_offset == 3


def test_truncate_to(plog):
    for i in range(30):
        append(plog, b"%03d" % i + b"." * 60)
    plog.truncate_to(12)
    assert plog.log_end_offset == 12
    assert values(plog)[-1].startswith(b"011")
    assert append(plog, b"again").base_offset == 12


def test_bytes_from_an_offset_to_the_end_across_segments(plog):
    for i in range(40):
        append(plog, b"v%03d" % i + b"." * 60)
    total = sum(seg.size for seg in plog.segments)
    assert len(plog.segments) > 2
    assert plog.bytes_from(0) == total
    assert plog.bytes_from(plog.log_end_offset) == 0
    middle = plog.bytes_from(20)
    assert middle == plog.size_bytes - sum(s.size for s in plog.read(0, 1 << 30, 20, True).slices)


def open_files_under(directory: Path) -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory)):
            found.append(target)
    return found


def test_only_segment_files_stay_open_and_flushed_indexes_survive_reopening(tmp_path):
    """One descriptor per segment (as Kafka); index files are opened only while a flush writes them, so a
    broker of 10,000 partitions needs 10,000 descriptors, not 30,000 (issue 31)."""
    log = PartitionLog(tmp_path / "t-0", "t", 0, settings(**{"segment.bytes": "4096"}))
    log.open()
    for i in range(60):
        append(log, b"v%03d" % i + b"." * 60, ts=1_000 + i)
    log.flush_sync()
    held = open_files_under(tmp_path / "t-0")
    assert sorted(held) == sorted(str(s.path) for s in log.segments) and len(log.segments) > 1
    index_entries = [len(s.index._relative) for s in log.segments]
    log.close()
    again = PartitionLog(tmp_path / "t-0", "t", 0, settings(**{"segment.bytes": "4096"}), log.log_end_offset)
    again.open()
    assert [len(s.index._relative) for s in again.segments] == index_entries
    assert again.offset_for_timestamp(1_030) is not None
    assert values(again, 30)[0].startswith(b"v030")
    again.close()


def test_a_new_log_is_prepared_without_fsyncs_and_its_first_flush_makes_it_durable(tmp_path, monkeypatch):
    """ADR 0033: creating thousands of partitions wrote ~5 fsyncs each; now none, and the first flush
    fsyncs the topic id, the first epoch, the directory and its entry in the log directory before (or
    with) the records. fsync is observed, not replaced."""
    synced: list[str] = []
    real_fsync = os.fsync

    def observed(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", observed)
    log_dir = tmp_path / "data"
    log_dir.mkdir()
    log = PartitionLog(log_dir / "t-0", "t", 0, settings())
    log.open()
    log.write_unsynced("partition.metadata", b"6a0fe9b8-3c2e-4f0e-9a41-0d8e7f8e2f10")
    log.leader_epochs.assign(3, 0, durable=False)
    assert synced == []
    append(log, b"first")
    log.flush_sync()
    directory = str(log_dir / "t-0")
    for expected in (f"{directory}/partition.metadata", f"{directory}/leader-epoch-checkpoint",
                     f"{directory}/00000000000000000000.log", directory, str(log_dir)):
        assert expected in synced, (expected, synced)
    assert (log_dir / "t-0" / "partition.metadata").read_bytes() == b"6a0fe9b8-3c2e-4f0e-9a41-0d8e7f8e2f10"
    synced.clear()
    append(log, b"second")
    log.flush_sync()
    assert synced == [f"{directory}/00000000000000000000.log"]  # once durable, only the records
    log.close()


def test_a_torn_topic_id_is_taken_for_none_and_a_new_file_is_written_in_place(tmp_path):
    """A new log's partition.metadata is written without a temporary file and without an fsync (ADR
    0033): after a power loss it may be empty or torn, which only a log without durable records can be,
    so it is read as no topic id (a log to adopt), never as another topic's."""
    from dm_broker import holdings
    from dm_broker.log.checkpoints import replace_unsynced

    log = PartitionLog(tmp_path / "t-0", "t", 0, settings())
    log.open()
    meta = log.directory / "partition.metadata"
    replace_unsynced(meta, b"6a0fe9b8-3c2e-4f0e-9a41-0d8e7f8e2f10")
    assert not list(log.directory.glob("*.tmp"))
    assert holdings.disk_topic_id(log) == "6a0fe9b8-3c2e-4f0e-9a41-0d8e7f8e2f10"
    replace_unsynced(meta, b"0c6f1f3a-8d58-4d5e-b0a4-5a3f3f6b9d21")  # an existing file: replaced whole
    assert holdings.disk_topic_id(log) == "0c6f1f3a-8d58-4d5e-b0a4-5a3f3f6b9d21"
    for torn in (b"", b"6a0fe9b8-3c2e-4f", b"\x00\x00\x00"):
        meta.write_bytes(torn)
        assert holdings.disk_topic_id(log) is None
    log.close()
