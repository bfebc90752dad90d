"""Everything a broker or controller writes is its user's alone: files 0600, directories 0700 (issue 65).

Segments hold the records, checkpoints the offsets, and the controller's cluster.json every user's SCRAM salt,
stored key and server key and the ACLs; they were written 0644 in directories of 0755, readable by any account
on the node. The process's umask makes every file and directory it creates private, whatever the call that
creates it, and the data directories themselves are made private at start (what an older version wrote in them
is then out of reach too)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700


def make_private(directories: Iterable[Path]) -> None:
    """New files and directories of this process private (umask 077), and `directories` 0700 where they exist.
    One that cannot be made so (missing, not a directory, not ours) is left to the data directory's lock,
    which says in one line why it cannot be used."""
    os.umask(0o077)
    for directory in directories:
        with contextlib.suppress(OSError):
            if directory.is_dir():
                directory.chmod(DIR_MODE)
