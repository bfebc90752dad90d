"""A floor of free space under each log directory (ADR 0043): a client's produce request is refused,
retriably, while writing it would leave less than `log.dir.min.free.bytes` free, so that a volume filling
up slows producers down before it stops the broker (ADR 0041).

Only client data is held back. Replication, offset commits, transaction markers and share-group state go
on: they are small, and a follower must be able to copy what its leader accepted. Reads go on. As soon as
retention, a deleted topic or a larger volume makes room, the producers' retries go through.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

AUTO = -1
AUTO_FRACTION = 0.05  # of the file system's size...
AUTO_CAP = 1 << 30  # ...and at most 1 GiB (Redpanda keeps 5 GiB by default; Kafka has no floor)
MEASURE_EVERY_S = 0.5


def floor_for(setting: int, total_bytes: int) -> int:
    """The floor in bytes for a file system of `total_bytes`: the setting, or with -1 the smaller of 5 % of
    the file system and 1 GiB (0: no floor)."""
    if setting == AUTO:
        return min(AUTO_CAP, int(total_bytes * AUTO_FRACTION))
    return max(setting, 0)


@dataclass(slots=True)
class _Measure:
    at: float
    free: int
    floor: int


class FreeSpaceGuard:
    """Free space per log directory, measured (statvfs) at most every MEASURE_EVERY_S; between measures
    what this broker accepted is taken off, so a burst cannot overshoot the floor by much."""

    def __init__(self, setting: Callable[[], int], clock: Callable[[], float] = time.monotonic,
                 statvfs: Callable[[Path], os.statvfs_result] = os.statvfs) -> None:
        self._setting = setting
        self._clock = clock
        self._statvfs = statvfs
        self._measures: dict[Path, _Measure] = {}

    def refusal(self, log_dir: Path, incoming: int) -> str | None:
        """Why `incoming` bytes cannot be written to `log_dir` now, or None."""
        now = self._clock()
        measure = self._measures.get(log_dir)
        if measure is None or now - measure.at >= MEASURE_EVERY_S:
            try:
                fs = self._statvfs(log_dir)
            except OSError:  # a failed directory shows when it is written (ADR 0041), not here
                return None
            measure = _Measure(now, fs.f_bavail * fs.f_frsize, floor_for(self._setting(), fs.f_blocks * fs.f_frsize))
            self._measures[log_dir] = measure
        if measure.floor <= 0 or measure.free - incoming >= measure.floor:
            measure.free -= incoming
            return None
        return (f"log directory {log_dir} has {measure.free} bytes free, under its floor of {measure.floor} "
                "(log.dir.min.free.bytes): produce requests wait until retention, a deleted topic or a larger "
                "volume makes room")
