"""How e2e scenarios share one kind cluster when pytest-xdist runs them side by side.

Most scenarios touch only their own namespace and hold the cluster *shared*. A few change what every
scenario depends on — they stop or scale down the operator, stop or cordon a node — and hold it
*exclusively*: they wait for the running scenarios to finish, and none starts until they are done. A
scenario waiting for the exclusive hold stops new shared ones from starting (a turnstile), so it is not
starved by a stream of them. The holds are flock(2) locks on files every worker of one run sees; in a
run without workers nothing contends and they are taken at once.

The operator every scenario uses is installed by the first worker that needs it and uninstalled by the
last one done with it (a count of users under a lock), so no worker pulls it from under another."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

STALE_S = 86400


def run_directory() -> Path:
    """A directory every worker of this run shares (pytest-xdist gives them one run id) and no other
    run does. No process knows when all of a run's workers are done with it (under xdist the controlling
    process does not even load this module), so each run's few bytes stay, and a run removes those of
    runs older than a day."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"
    runs = Path(tempfile.gettempdir()) / "dm-e2e-runs"
    path = runs / run
    if not path.exists():
        for old in runs.glob("*"):
            if time.time() - old.stat().st_mtime > STALE_S:
                shutil.rmtree(old, ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def _locked(path: Path, how: int) -> Iterator[IO[bytes]]:
    with open(path, "a+b") as handle:
        fcntl.flock(handle, how)
        try:
            yield handle
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class ClusterHold:
    """Shared and exclusive holds on the cluster, writer-preferring (see the module's docstring)."""

    def __init__(self, directory: Path) -> None:
        self._turnstile = directory / "turnstile.lock"
        self._hold = directory / "hold.lock"
        self._handle: IO[bytes] | None = None
        self.exclusive = False

    @property
    def held(self) -> bool:
        return self._handle is not None

    def take(self, exclusive: bool) -> None:
        """Takes the hold (releasing one of the other kind first); waits as long as it must."""
        if self._handle is not None:
            if self.exclusive == exclusive:
                return
            self.release()
        with _locked(self._turnstile, fcntl.LOCK_EX):
            handle = open(self._hold, "a+b")  # noqa: SIM115 (held past this block, closed by release)
            fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        self._handle, self.exclusive = handle, exclusive

    def release(self) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None


class SharedInstallation:
    """Something several workers use (the operator): set up by the first, torn down by the last."""

    def __init__(self, directory: Path, name: str) -> None:
        self._lock = directory / f"{name}.lock"
        self._users = directory / f"{name}.users"

    def _count(self) -> int:
        return int(self._users.read_text() or 0) if self._users.exists() else 0

    def join(self, set_up: Callable[[], None]) -> None:
        with _locked(self._lock, fcntl.LOCK_EX):
            users = self._count()
            if users == 0:
                set_up()
            self._users.write_text(str(users + 1))

    def leave(self, tear_down: Callable[[], None]) -> None:
        with _locked(self._lock, fcntl.LOCK_EX):
            users = max(self._count() - 1, 0)
            self._users.write_text(str(users))
            if users == 0:
                tear_down()
