"""Replication throttling for partition moves (Kafka's leader/follower.replication.throttled.*).

Only throttled replicas count against the quota: those a reassignment is adding (always), and
those a topic lists in `leader.replication.throttled.replicas` / `follower.replication.throttled.
replicas`. In-sync replication is never slowed, so acks=all producers do not wait for a move.
"""

from __future__ import annotations

import time
from collections.abc import Callable

UNLIMITED = (1 << 63) - 1


class ByteRateQuota:
    """A token bucket holding at most one second of the rate: a caller asks how many bytes it may
    move now (0 while over quota) and records what it moved. Over-sends (a whole batch when less
    was available) become debt, so the rate holds on average."""

    def __init__(self, rate: Callable[[], int], clock: Callable[[], float] = time.monotonic) -> None:
        self._rate = rate
        self._clock = clock
        self._tokens = 0.0
        self._at: float | None = None

    def _refill(self) -> float:
        rate = self._rate()
        now = self._clock()
        if self._at is None:
            self._tokens = float(rate)
        else:
            self._tokens = min(self._tokens + (now - self._at) * rate, float(rate))
        self._at = now
        return rate

    def unlimited(self) -> bool:
        return self._rate() >= UNLIMITED

    def available(self) -> int:
        """Bytes that may be moved now (UNLIMITED when there is no limit)."""
        if self.unlimited():
            return UNLIMITED
        self._refill()
        return max(int(self._tokens), 0)

    def record(self, nbytes: int) -> None:
        if nbytes and not self.unlimited():
            self._refill()
            self._tokens -= nbytes

    def seconds_until_available(self) -> float:
        if self.unlimited():
            return 0.0
        rate = self._refill()
        return 0.0 if self._tokens > 0 else (1 - self._tokens) / max(rate, 1)


def listed(replicas_config: str, partition: int, broker: int) -> bool:
    """Whether a throttled-replicas list ("*", or "partition:broker,...") names this replica."""
    if not replicas_config:
        return False
    entries = replicas_config.split(",")  # normalised by the config parser: no blanks
    return "*" in entries or f"{partition}:{broker}" in entries
