"""Exclusive ownership of a data directory, as Kafka's `.lock`: an flock on `<dir>/.lock` held for
the process's lifetime. Two processes on one directory corrupt it silently (two leaders of the same
replica, truncations that drop acknowledged records), so the second refuses to start and names the
holder. The kernel releases the lock when its holder dies, however it dies, so a stale lock file
of a dead process is never an obstacle."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

from .private_files import FILE_MODE

LOCK_FILE = ".lock"


class DirectoryInUse(Exception):
    """Another live process holds the directory."""


class DirectoryUnusable(Exception):
    """The directory cannot be created or written (a file in its place, a read-only or full file system)."""


class DirectoryLock:
    def __init__(self, directory: Path, owner: str) -> None:
        self.directory = directory
        self.owner = owner
        self._fd: int | None = None

    @property
    def path(self) -> Path:
        return self.directory / LOCK_FILE

    def acquire(self) -> DirectoryLock:
        if self.directory.exists() and not self.directory.is_dir():
            raise DirectoryUnusable(f"{self.directory} is not a directory")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        except OSError as exc:
            raise self._unusable(exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 256, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise DirectoryInUse(f"{self.directory} is in use by {holder}; stop it first, or use another "
                                 "directory") from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"process {os.getpid()} ({self.owner})\n".encode(), 0)
        except OSError as exc:  # a full volume: the lock holds, only the holder's name is missing
            if exc.errno != errno.ENOSPC:
                os.close(fd)
                raise self._unusable(exc) from None
        self._fd = fd
        return self

    def _unusable(self, exc: OSError) -> DirectoryUnusable:
        where = f" ({exc.filename})" if exc.filename else ""
        return DirectoryUnusable(f"{self.directory} cannot be used as a data directory: {exc.strerror}{where}")

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
            self._fd = None

    def __enter__(self) -> DirectoryLock:
        return self.acquire()

    def __exit__(self, *_: object) -> None:
        self.release()
