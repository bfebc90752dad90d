"""The memory the listeners' requests may hold at once (Kafka's `queued.max.request.bytes`, KIP-72).

A request reserves its declared size once its size is known, and gives it back once the request no
longer needs it (its handler is through, or, for an acks=all produce, its batches are appended). While
the pool is used up no connection starts receiving a new request: its socket stops being read and the
kernel's buffers push back on the client, as Kafka mutes channels. A request that has begun is never
held back, so requests half-received cannot wait for each other. The pool is not strict, as Kafka's
broker pool is not: any memory left admits the next request, so one larger than what is left (up to
socket.request.max.bytes) still goes through, and the pool is exceeded by at most one request (ADR 0044).
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)
Resume = Callable[[], None]
LOG_EVERY_S = 60.0


class RequestMemory:
    """Bytes held by requests being received or handled, against `limit` (-1: no limit)."""

    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit if limit > 0 else -1  # as Kafka: 0 or less is no pool
        self.used = 0
        self._clock = clock
        self._waiting: collections.OrderedDict[Resume, None] = collections.OrderedDict()
        self._depleted_at: float | None = None
        self._depleted_seconds = 0.0
        self._logged_at = -LOG_EVERY_S

    @property
    def available(self) -> bool:
        return self.limit < 0 or self.used < self.limit

    def take(self, nbytes: int) -> None:
        """Counts nbytes as held (the caller checked `available`)."""
        self.used += nbytes
        if not self.available and self._depleted_at is None:
            self._depleted_at = self._clock()

    def give_back(self, nbytes: int) -> None:
        self.used -= nbytes
        if self.available:
            if self._depleted_at is not None:
                self._depleted_seconds += self._clock() - self._depleted_at
                self._depleted_at = None
            # First come, first served; a waiter that takes memory may use the pool up again.
            while self._waiting and self.available:
                resume, _ = self._waiting.popitem(last=False)
                resume()

    def wait(self, resume: Resume) -> None:
        """resume() is called once memory is available again."""
        self._waiting[resume] = None
        now = self._clock()
        if now - self._logged_at >= LOG_EVERY_S:
            self._logged_at = now
            log.warning("request memory used up (queued.max.request.bytes=%d, %d reserved): %d connection(s) wait "
                        "before their next request is read", self.limit, self.used, len(self._waiting))

    def forget(self, resume: Resume) -> None:
        self._waiting.pop(resume, None)

    @property
    def waiting(self) -> int:
        """Connections whose reading waits for memory."""
        return len(self._waiting)

    def depleted_seconds(self) -> float:
        """How long the pool has been used up in all (Kafka's MemoryPoolDepletedTimeTotal)."""
        ongoing = self._clock() - self._depleted_at if self._depleted_at is not None else 0.0
        return self._depleted_seconds + ongoing
