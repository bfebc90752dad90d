"""A write the file system refuses (ADR 0041): reported as a failure of the log directory, and the log left
exactly as it was before that write, on disk and in memory."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from dm_broker.log import dir_failure
from dm_broker.log.dir_failure import LogDirFailure
from dm_broker.log.partition_log import PartitionLog
from harness import SmallVolume, small_volumes_available
from test_partition_log import append, settings, values


def test_only_errors_of_the_storage_count():
    full = OSError(errno.ENOSPC, "No space left on device")
    assert dir_failure.storage_error(full) is full
    try:
        try:
            raise full
        except OSError as exc:
            raise RuntimeError("a job failed") from exc
    except RuntimeError as wrapped:
        assert dir_failure.storage_error(wrapped) is full
    # a file gone with its deleted topic, a closed descriptor, a peer that hung up: not a failed disk
    for code in (errno.ENOENT, errno.EBADF, errno.ECONNRESET, errno.EPIPE):
        assert dir_failure.storage_error(OSError(code, "x")) is None
    assert dir_failure.storage_error(ValueError("x")) is None


@pytest.mark.skipif(not small_volumes_available(), reason="mounting a small tmpfs (a volume that fills) needs root")
def test_a_write_the_full_volume_refuses_leaves_the_log_as_it_was(tmp_path: Path):
    reported: list[LogDirFailure] = []
    dir_failure.on_failure(reported.append)
    try:
        with SmallVolume(tmp_path / "volume", "1m") as volume:
            plog = PartitionLog(tmp_path / "volume" / "t-0", "t", 0, settings())
            plog.open()
            written = 0
            with pytest.raises(LogDirFailure) as failed:
                for i in range(100):  # 1 MB fills before 100 records of 100 KB
                    append(plog, b"%03d" % i + b"." * 100_000)
                    written += 1
            assert failed.value.cause.errno == errno.ENOSPC
            assert [f.log_dir for f in reported] == [tmp_path / "volume"]
            # The refused batch was partly written (the volume took what fit); the file is cut back to the
            # log's end, so no recovery scan can find any of it.
            assert plog.log_end_offset == written
            assert plog.active.path.stat().st_size == plog.active.size
            volume.grow("4m")
            append(plog, b"after")
            assert [v[:3] for v in values(plog)] == [b"%03d" % i for i in range(written)] + [b"aft"]
            plog.close()
            reopened = PartitionLog(tmp_path / "volume" / "t-0", "t", 0, settings())
            reopened.open()
            assert reopened.log_end_offset == written + 1 and reopened.truncated_bytes_on_recovery == 0
            reopened.close()
    finally:
        dir_failure.on_failure(None)


# -- the floor of free space (ADR 0043) ------------------------------------------------------------------


class _FileSystem:
    """statvfs answers of a file system whose free space the test sets."""

    def __init__(self, total: int, free: int) -> None:
        self.total, self.free, self.calls = total, free, 0

    def __call__(self, path):
        import os

        self.calls += 1
        return os.statvfs_result((4096, 4096, self.total // 4096, self.free // 4096, self.free // 4096,
                                  0, 0, 0, 0, 255))


def test_the_floor_by_default_is_five_percent_and_at_most_a_gibibyte():
    from dm_broker.log.free_space import floor_for

    assert floor_for(-1, 10 << 30) == int((10 << 30) * 0.05)
    assert floor_for(-1, 500 << 30) == 1 << 30
    assert floor_for(0, 500 << 30) == 0 and floor_for(123, 1 << 30) == 123


def test_below_the_floor_a_request_is_refused_and_room_made_lets_it_through():
    from dm_broker.log.free_space import MEASURE_EVERY_S, FreeSpaceGuard

    fs, now = _FileSystem(total=100 << 20, free=10 << 20), [0.0]
    guard = FreeSpaceGuard(lambda: 8 << 20, clock=lambda: now[0], statvfs=fs)
    directory = Path("/data")
    assert guard.refusal(directory, 1 << 20) is None  # 10 MB free, 9 MB after it
    refused = guard.refusal(directory, 2 << 20)  # accepted requests count until the next measure
    assert refused is not None and "log.dir.min.free.bytes" in refused and "/data" in refused
    assert fs.calls == 1
    fs.free = 20 << 20  # retention ran
    assert guard.refusal(directory, 2 << 20) is not None  # not measured again yet
    now[0] += MEASURE_EVERY_S
    assert guard.refusal(directory, 2 << 20) is None and fs.calls == 2
    assert f"floor of {8 << 20} " in guard.refusal(directory, 20 << 20)  # the floor worked out: 8 MiB
    off = FreeSpaceGuard(lambda: 0, statvfs=_FileSystem(total=100 << 20, free=0))
    assert off.refusal(directory, 1 << 20) is None
