"""Leader epoch cache: the start offset of every leader epoch in a partition's log.

Used to answer OffsetForLeaderEpoch, so a follower or a returning leader can truncate to the
point where its log and the current leader's agree.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from .checkpoints import fsync_dir, fsync_file, replace_durably, replace_unsynced

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[tuple[int, int]] = []  # (epoch, start offset), both increasing
        # A follower records a new epoch without an fsync on its event loop; the log's next flush makes
        # it durable (sync(), in the flush's thread) before the records it covers (ADR 0032).
        self.unsynced = False
        # Raised by every change of the entries: a write prepared earlier (assign_later) must not replace
        # a newer file with older entries.
        self._generation = 0
        self._file_lock = threading.Lock()
        try:
            lines = path.read_text().splitlines()
            count = int(lines[1])
            for line in lines[2 : 2 + count]:
                epoch, offset = line.split()
                self.entries.append((int(epoch), int(offset)))
        except (FileNotFoundError, IndexError, ValueError):
            self.entries = []

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int, durable: bool = True) -> None:
        """`durable=False` (a follower's append, a new log): written now, fsynced by the log's next flush."""
        if self._add(epoch, start_offset):
            self._save(durable)

    def _add(self, epoch: int, start_offset: int) -> bool:
        """Puts a new epoch in the entries; False (nothing changed) when it is not newer than the last."""
        if self.entries and epoch <= self.entries[-1][0]:
            return False
        # A new epoch starting before older ones (after truncation) replaces them.
        self.entries = [(e, o) for e, o in self.entries if o < start_offset]
        self.entries.append((epoch, start_offset))
        return True

    def assign_later(self, epoch: int, start_offset: int) -> Callable[[], None] | None:
        """A new leader's epoch: in the entries now (OffsetForLeaderEpoch answers with it), on disk by the
        returned job, which writes and fsyncs the file in a worker thread; the leader appends no record of
        the epoch before the job is done (Partition.append_as_leader). None when the epoch is not new.
        A broker taking over 1,000 partitions wrote 1,000 files with two fsyncs each on its event loop
        (ADR 0039). The job does nothing if the entries changed again meanwhile (that write has them)
        or the log's directory is gone."""
        if not self._add(epoch, start_offset):
            return None
        return self._write_job(durable=True)

    def assign_fetched(self, epochs: list[tuple[int, int]]) -> tuple[Callable[[], None], Callable[[], None]] | None:
        """A follower's epochs first seen in fetched batches ((epoch, base offset) in log order): in the
        entries now, and (job, undo): the job writes the file without an fsync (the log's next flush makes it
        durable, before the records) in a worker thread, and the follower appends the records only after it;
        undo, on the event loop, takes the epochs out again when the job failed and nothing changed since.
        None when no epoch is new. Written on the loop, each new epoch cost a file creation (up to 3 ms on a
        slow file system): 3,000 partitions' first records after a leader change stalled a follower for
        seconds (ADR 0039)."""
        before = self.entries
        added = [self._add(epoch, offset) for epoch, offset in epochs]
        if not any(added):
            return None
        write = self._write_job(durable=False)
        generation = self._generation

        def undo() -> None:
            if self._generation == generation:
                self.entries = before

        return write, undo

    def _write_job(self, durable: bool) -> Callable[[], None]:
        data = self._encoded()
        with self._file_lock:
            self._generation += 1
            generation = self._generation

        def write() -> None:
            with self._file_lock:
                if generation != self._generation:
                    return
                try:
                    (replace_durably if durable else replace_unsynced)(self.path, data)
                except FileNotFoundError:  # the log was deleted or moved meanwhile
                    return
                self.unsynced = not durable

        return write

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest epoch <= requested, end offset of that epoch), as OffsetForLeaderEpoch."""
        if not self.entries or epoch < self.entries[0][0]:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch >= self.entries[-1][0]:
            return self.entries[-1][0], log_end_offset
        for i, (e, _) in enumerate(self.entries):
            if e > epoch:
                return self.entries[i - 1][0], self.entries[i][1]
        return self.entries[-1][0], log_end_offset

    def truncate_from_end(self, end_offset: int) -> None:
        kept = [(e, o) for e, o in self.entries if o < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def truncate_from_start(self, start_offset: int) -> None:
        if not self.entries:
            return
        kept = [(e, o) for e, o in self.entries if o > start_offset]
        older = [(e, o) for e, o in self.entries if o <= start_offset]
        if older:
            kept.insert(0, (older[-1][0], start_offset))
        if kept != self.entries:
            self.entries = kept
            self._save()

    def sync(self, sync_dir: bool = True) -> None:
        """Makes the last write durable (the file, then its directory entry unless the caller fsyncs the
        directory next). Called from a flush's thread; the lock keeps a write on the event loop from
        replacing the file between the two."""
        with self._file_lock:
            if not self.unsynced:
                return
            fsync_file(self.path)
            if sync_dir:
                fsync_dir(self.path.parent)
            self.unsynced = False

    def _encoded(self) -> bytes:
        lines = ["0", str(len(self.entries))] + [f"{e} {o}" for e, o in self.entries]
        return ("\n".join(lines) + "\n").encode()

    def _save(self, durable: bool = True) -> None:
        data = self._encoded()
        with self._file_lock:
            self._generation += 1
            if durable:  # the log's directory exists while the log does; a deleted one is not made again
                replace_durably(self.path, data)
            else:
                replace_unsynced(self.path, data)
            self.unsynced = not durable
