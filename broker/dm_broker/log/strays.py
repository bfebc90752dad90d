"""Stray logs: partition directories a broker kept aside because no decision the controller recorded
allowed deleting them (ADR 0017), named `<topic>-<partition>.<id>-stray` as Kafka names them. They are
deleted only by an explicit request (`dm strays delete`), which is recorded in the directory's
`__dm_meta/stray-deletions.log`."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from .checkpoints import fsync_dir

SUFFIX = "-stray"
AUDIT = "stray-deletions.log"


@dataclass(frozen=True)
class Stray:
    name: str
    path: Path
    bytes: int


def find(directories: list[Path]) -> list[Stray]:
    found = []
    for directory in directories:
        if not directory.is_dir():
            continue
        for path in sorted(directory.iterdir()):
            found += find_in(path)
    return found


def find_in(path: Path) -> list[Stray]:
    """The stray log at `path` (one or none)."""
    if not (path.is_dir() and path.name.endswith(SUFFIX)):
        return []
    return [Stray(path.name, path, sum(f.stat().st_size for f in path.iterdir() if f.is_file()))]


def delete(directories: list[Path], name: str, by: str) -> Stray:
    """Deletes one stray directory and records it; KeyError when there is no such stray."""
    stray = next((s for s in find(directories) if s.name == name), None)
    if stray is None:
        raise KeyError(name)
    shutil.rmtree(stray.path)
    fsync_dir(stray.path.parent)
    audit = stray.path.parent / "__dm_meta" / AUDIT
    audit.parent.mkdir(parents=True, exist_ok=True)
    with open(audit, "a") as f:
        f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} deleted {name} ({stray.bytes} bytes) by {by}\n")
    return stray
