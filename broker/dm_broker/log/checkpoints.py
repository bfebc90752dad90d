"""Small durable files: written to a temporary name, fsynced, renamed, directory fsynced."""

from __future__ import annotations

import os
from pathlib import Path

from ..private_files import FILE_MODE


def atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_durably(path, data)


def replace_durably(path: Path, data: bytes) -> None:
    """atomic_write into a directory that must exist already (FileNotFoundError otherwise): a write from a
    worker thread must not create again the directory of a log deleted meanwhile."""
    _replace(path, data, durable=True)
    fsync_dir(path.parent)


def replace_unsynced(path: Path, data: bytes) -> None:
    """Replaces `path` with `data` through a temporary name, without fsync: a reader sees the old
    file or the new one, never half of one; durable only once fsynced later (the caller tracks that).
    A file that does not exist yet is written in place: there is no old content to keep, and creating
    a temporary file and renaming it costs two more directory operations, which add up when thousands
    of partitions are created at once (ADR 0033). Its readers take a torn file for a missing one."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        _replace(path, data, durable=False)
        return
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def _replace(path: Path, data: bytes, durable: bool) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        _write_all(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fsync_file(path: Path) -> None:
    """fsyncs a file written earlier without one (a file gone meanwhile needs nothing)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_offsets(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    """Kafka's checkpoint text format: version, count, then `topic partition offset` lines."""
    lines = ["0", str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())]
    atomic_write(path, ("\n".join(lines) + "\n").encode())


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    out: dict[tuple[str, int], int] = {}
    try:
        count = int(lines[1])
        for line in lines[2 : 2 + count]:
            topic, partition, offset = line.rsplit(" ", 2)
            out[(topic, int(partition))] = int(offset)
    except (IndexError, ValueError):
        # A damaged checkpoint only costs a longer recovery: everything is rescanned.
        return {}
    return out
