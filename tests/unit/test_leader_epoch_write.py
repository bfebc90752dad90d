"""A new leader writes its epoch to the epoch file in a worker thread (ADR 0039), and appends no record of
the epoch before the file has it: a record of an epoch the file lacks could survive a crash on a replica
that then cannot tell it must truncate it.

The slow or failing disk is injected (a gate on the file write): a real disk cannot be made slow or
broken on demand."""

from __future__ import annotations

import asyncio
import struct
import threading
from pathlib import Path
from types import SimpleNamespace

import crc32c
import pytest
from dm_broker.config import BrokerConfig, TopicSettings
from dm_broker.errors import KafkaError
from dm_broker.log import leader_epochs
from dm_broker.log.leader_epochs import LeaderEpochCache
from dm_broker.log.partition_log import PartitionLog
from dm_broker.log.records import build_batch, validate_batches
from dm_broker.protocol.fetch_encoder import PartitionResult
from dm_broker.replication.fetcher import ReplicaFetcher
from dm_broker.replication.partition import Partition
from kio.schema.errors import ErrorCode


def new_partition(tmp_path: Path) -> Partition:
    settings = TopicSettings(BrokerConfig.build({}, environ={}), {})
    plog = PartitionLog(tmp_path / "t-0", "t", 0, settings)
    plog.open()
    return Partition("t", 0, plog, node_id=1)


def on_disk(part: Partition) -> list[tuple[int, int]]:
    return LeaderEpochCache(part.log.leader_epochs.path).entries


def batch() -> tuple[bytearray, list]:
    data = bytearray(build_batch([(b"k", b"v", [])], timestamp_ms=1))
    return data, validate_batches(data, 1 << 20)


def broken_disk(path: Path, data: bytes) -> None:
    raise OSError(5, "Input/output error")


def test_no_record_of_a_new_epoch_before_the_epoch_is_on_disk(tmp_path, monkeypatch):
    gate = threading.Event()
    real = leader_epochs.replace_durably

    def slow_disk(path: Path, data: bytes) -> None:
        assert gate.wait(10)
        real(path, data)

    monkeypatch.setattr(leader_epochs, "replace_durably", slow_disk)

    async def scenario() -> None:
        part = new_partition(tmp_path)
        part.become_leader(leader_epoch=3, partition_epoch=1, replicas=[1], isr=[1])
        assert part.log.leader_epochs.end_offset_for(3, 0) == (3, 0)  # answered from memory at once
        append = asyncio.create_task(part.append_as_leader(*batch()))
        await asyncio.sleep(0.2)
        assert not append.done() and part.log.log_end_offset == 0 and on_disk(part) == []
        gate.set()
        result = await asyncio.wait_for(append, 10)
        assert result.base_offset == 0 and on_disk(part) == [(3, 0)]
        assert (await part.append_as_leader(*batch())).base_offset == 1  # no wait once written

    asyncio.run(scenario())


def test_an_epoch_that_cannot_be_written_refuses_appends_with_a_storage_error(tmp_path, monkeypatch):
    monkeypatch.setattr(leader_epochs, "replace_durably", broken_disk)

    async def scenario() -> None:
        part = new_partition(tmp_path)
        part.become_leader(leader_epoch=1, partition_epoch=1, replicas=[1], isr=[1])
        for _ in range(2):
            with pytest.raises(KafkaError) as refused:
                await part.append_as_leader(*batch())
            assert refused.value.code == ErrorCode.kafka_storage_error
        assert part.log.log_end_offset == 0

    asyncio.run(scenario())


def test_a_later_write_wins_and_a_deleted_log_is_not_created_again(tmp_path):
    directory = tmp_path / "t-0"
    directory.mkdir()
    cache = LeaderEpochCache(directory / "leader-epoch-checkpoint")
    first = cache.assign_later(1, 0)
    assert first is not None and cache.assign_later(1, 5) is None  # not a new epoch
    second = cache.assign_later(2, 10)
    assert second is not None
    second()
    first()  # prepared earlier, run later: must not put the older entries back
    assert LeaderEpochCache(cache.path).entries == [(1, 0), (2, 10)]
    cache.truncate_from_end(10)  # a durable write of its own
    stale = cache.assign_later(3, 10)
    cache.truncate_from_start(5)  # written durably after the job was prepared: the job must not undo it
    assert stale is not None
    stale()
    assert LeaderEpochCache(cache.path).entries == [(1, 5), (3, 10)]
    gone = cache.assign_later(4, 20)
    for f in directory.iterdir():
        f.unlink()
    directory.rmdir()
    assert gone is not None
    gone()
    assert not directory.exists()


# -- a follower: the epochs of fetched batches -------------------------------------------------------


def fetched(epoch: int, base_offset: int, count: int = 1) -> bytes:
    data = bytearray(build_batch([(b"k", b"v", [])] * count, base_offset=base_offset, timestamp_ms=1))
    struct.pack_into(">i", data, 12, epoch)  # partitionLeaderEpoch, as the leader stamped it
    struct.pack_into(">I", data, 17, crc32c.crc32c(memoryview(data)[21:]))
    return bytes(data)


def follower(tmp_path: Path) -> Partition:
    part = new_partition(tmp_path)
    part.become_follower(2, leader_epoch=5, partition_epoch=1, replicas=[1, 2], isr=[1, 2])
    return part


def fetcher_of(leader: int) -> ReplicaFetcher:
    return ReplicaFetcher(SimpleNamespace(config={"max.incremental.fetch.session.cache.slots": 1000}), leader)


def unseen_in(part: Partition, answer: PartitionResult) -> list:
    return [(("t", 0), part, part.log.unseen_batches(answer.records))]


def test_a_follower_finds_the_new_epochs_of_what_it_fetched(tmp_path):
    part = follower(tmp_path)
    data = fetched(4, 0, 2) + fetched(4, 2) + fetched(5, 3)
    assert part.log.new_epochs(part.log.unseen_batches(data)) == [(4, 0), (5, 3)]
    part.log.append_as_follower(fetched(4, 0, 2))
    # the batches it has, and epoch 4, are not new
    assert part.log.new_epochs(part.log.unseen_batches(data)) == [(5, 3)]


def test_a_follower_writes_fetched_epochs_off_the_loop_before_their_records(tmp_path, monkeypatch):
    """The follower's file write (unsynced: the next flush fsyncs it) runs in an epoch writer thread; the
    answer's records are appended only after it (the fetcher awaits _write_new_epochs before _apply)."""
    gate = threading.Event()
    writers: list[str] = []
    real = leader_epochs.replace_unsynced

    def slow_disk(path: Path, data: bytes) -> None:
        writers.append(threading.current_thread().name)
        assert gate.wait(10)
        real(path, data)

    monkeypatch.setattr(leader_epochs, "replace_unsynced", slow_disk)

    async def scenario() -> None:
        part = follower(tmp_path)
        answer = PartitionResult(0, 0, 1, 1, 0, fetched(5, 0))
        writing = asyncio.create_task(fetcher_of(2)._write_new_epochs(unseen_in(part, answer)))
        await asyncio.sleep(0.2)
        assert not writing.done() and on_disk(part) == [] and part.log.leader_epochs.latest_epoch == 5
        gate.set()
        assert await asyncio.wait_for(writing, 10) == set()
        assert on_disk(part) == [(5, 0)] and part.log.leader_epochs.unsynced
        assert writers and all(name.startswith("dm-leader-epoch") for name in writers)
        part.log.append_as_follower(answer.records)  # nothing left to write on the loop
        assert part.log.log_end_offset == 1 and len(writers) == 1

    asyncio.run(scenario())


def test_a_fetched_epoch_that_cannot_be_written_is_taken_out_again(tmp_path, monkeypatch):
    monkeypatch.setattr(leader_epochs, "replace_unsynced", broken_disk)

    async def scenario() -> None:
        part = follower(tmp_path)
        answer = PartitionResult(0, 0, 1, 1, 0, fetched(5, 0))
        assert await fetcher_of(2)._write_new_epochs(unseen_in(part, answer)) == {("t", 0)}
        assert part.log.leader_epochs.entries == [] and part.log.log_end_offset == 0

    asyncio.run(scenario())


def test_undo_leaves_epochs_alone_once_the_cache_changed_again(tmp_path):
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    _, undo = cache.assign_fetched([(3, 0)])
    cache.assign(4, 10)  # written since: the file has epoch 3 too
    undo()
    assert cache.entries == [(3, 0), (4, 10)]
