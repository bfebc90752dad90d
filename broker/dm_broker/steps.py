"""ADR 0039's step: work whose size grows with the partition count (applying metadata, copying figures for
a scrape, encoding a Metadata answer, refreshing a follower's fetch plan, what a fetch answer carries) does
at most this many partitions between two turns of the event loop."""

from __future__ import annotations

PARTITIONS_PER_STEP = 500


class PartitionSteps:
    """Counts the partitions a pass over many topics (of any sizes) has done, and says when the loop is
    due its turn: `if steps.one_done(): await asyncio.sleep(0)`."""

    def __init__(self, per_step: int | None = None) -> None:
        self._per_step = per_step or PARTITIONS_PER_STEP
        self._left = self._per_step

    def one_done(self) -> bool:
        self._left -= 1
        if self._left:
            return False
        self._left = self._per_step
        return True
