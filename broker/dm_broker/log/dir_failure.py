"""A log directory whose file system failed a write: the broker stops (ADR 0041).

Kafka's LogDirFailureChannel takes a directory offline on any I/O error and halts the broker when no
directory is left. dm stops the broker on the first one: after a failed fsync the kernel may already have
dropped the dirty pages it could not write, so the process cannot trust what it believes is on disk, and
a write that failed half-way leaves a log whose in-memory state and file differ. A stopped broker is
fenced at once (its controller session closes), its partitions are led by in-sync replicas, and its next
start recovers the logs from what the disk really holds, as after a SIGKILL.

Only errors that mean the storage failed count (a full or read-only file system, an I/O error, a
corrupted file system): a file that vanished because its topic was deleted meanwhile is not a failed disk.
"""

from __future__ import annotations

import errno
import functools
import inspect
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger(__name__)

STORAGE_ERRNOS = frozenset(code for code in (
    errno.ENOSPC,  # no space left
    errno.EDQUOT,  # disk quota exceeded
    errno.EIO,  # the device failed
    errno.EROFS,  # remounted read-only (ext4's errors=remount-ro after corruption)
    errno.EFBIG,  # a file larger than the file system or RLIMIT_FSIZE allows
    getattr(errno, "EUCLEAN", None),  # "structure needs cleaning": a corrupted file system
) if code is not None)


class LogDirFailure(Exception):
    """Kafka's KafkaStorageException: answered as KAFKA_STORAGE_ERROR, which clients retry elsewhere."""

    def __init__(self, log_dir: Path | None, cause: OSError) -> None:
        self.log_dir = log_dir
        self.cause = cause
        where = f"log directory {log_dir}" if log_dir is not None else "a log directory"
        name = errno.errorcode.get(cause.errno or 0, "?")
        file = f" writing {cause.filename}" if cause.filename else ""
        super().__init__(f"{where} failed{file}: {cause.strerror or cause} ({name})")


Listener = Callable[[LogDirFailure], None]
_listener: Listener | None = None


def on_failure(listener: Listener | None) -> None:
    """What happens on a failure: the broker process stops (app.py); nothing beyond raising in a test
    that drives logs in its own process."""
    global _listener
    _listener = listener


def storage_error(exc: BaseException | None) -> OSError | None:
    """The storage error behind exc (itself, or what caused it), if any."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, LogDirFailure):
            return exc.cause
        if isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS:
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def report(log_dir: Path | None, cause: OSError) -> LogDirFailure:
    failure = LogDirFailure(log_dir, cause)
    if _listener is None:
        log.error("%s", failure)
    else:
        _listener(failure)  # logs why it stops the broker
    return failure


def check(exc: BaseException, log_dir: Path | None = None) -> None:
    """For the places that catch whatever a job raised: reports a storage error behind it."""
    cause = storage_error(exc)
    if cause is not None and not isinstance(exc, LogDirFailure):
        report(log_dir, cause)


F = TypeVar("F", bound=Callable[..., Any])


def guards_log_dir(method: F) -> F:
    """For a PartitionLog method that writes: a storage error in it is a failure of the log's directory
    (the partition directory's parent), reported before anyone can act on the half-done write."""
    if inspect.iscoroutinefunction(method):
        @functools.wraps(method)
        async def guarded_async(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return await method(self, *args, **kwargs)
            except OSError as exc:
                if exc.errno not in STORAGE_ERRNOS:
                    raise
                raise report(self.log_dir, exc) from exc
        return guarded_async  # type: ignore[return-value]

    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except OSError as exc:
            if exc.errno not in STORAGE_ERRNOS:
                raise
            raise report(self.log_dir, exc) from exc
    return guarded  # type: ignore[return-value]
