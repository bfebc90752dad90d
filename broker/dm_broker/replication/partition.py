"""A partition replica hosted by this broker: its log plus leadership state.

Today every partition has one replica (this broker) and the high watermark is the log end
offset. The replication layer extends this class with followers, ISR and acks=all waiting.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ..log.partition_log import AppendResult, PartitionLog
from ..log.records import BatchHeader


@dataclass(eq=False)
class Partition:
    topic: str
    index: int
    log: PartitionLog
    leader_id: int
    leader_epoch: int = 0
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    closed: bool = False
    _waiters: set[asyncio.Future[None]] = field(default_factory=set)

    def close(self) -> None:
        """The partition is gone from this broker (topic deleted); waiting fetches return."""
        self.closed = True
        self._wake_fetchers()

    @property
    def high_watermark(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        return self.high_watermark  # no transactions: nothing is ever pending

    async def append_as_leader(self, data: bytearray, headers: list[BatchHeader]) -> AppendResult:
        """Appends validated batches. Raises the producer-state errors; returns the original
        offsets for a retried batch instead of appending it twice."""
        first = headers[0]
        cached = self.log.check_duplicate(first)
        if cached is not None:
            return AppendResult(cached.first_offset, cached.last_offset, -1, duplicate=True)
        for header in headers[1:]:
            self.log.check_duplicate(header)
        result = self.log.append(data, headers, self.leader_epoch)
        self._wake_fetchers()
        if self.log.flush_due():
            await self.log.flush()
        return result

    async def append_internal(self, data: bytearray) -> AppendResult:
        """Appends a batch the broker built itself (group metadata, offsets), once committed."""
        from ..log.records import validate_batches

        return await self.append_as_leader(data, validate_batches(data, 1 << 30))

    # -- fetch long-poll ---------------------------------------------------------------------

    def add_waiter(self, fut: asyncio.Future[None]) -> None:
        self._waiters.add(fut)

    def remove_waiter(self, fut: asyncio.Future[None]) -> None:
        self._waiters.discard(fut)

    def _wake_fetchers(self) -> None:
        if self._waiters:
            for fut in self._waiters:
                if not fut.done():
                    fut.set_result(None)
            self._waiters.clear()
