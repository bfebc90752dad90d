"""How far a client is over its quota, and for how long it must pause (a token bucket).

Kafka measures bandwidth quotas with a rate over `quota.window.num` samples of
`quota.window.size.seconds` and throttles by (rate - bound) / bound x window. Measured against dm
with librdkafka's 1 MB requests, that sawtooths: a first burst of a whole window's worth passes, the
throttles that follow add up to the window, and when the burst's sample expires the next burst
passes — 1.2x the quota on average over 27 s, and 0.2x of it for ten seconds at a time. dm uses the
token bucket Kafka itself adopted for controller mutations (KIP-599) for every quota: it refills at
the bound, holds at most the bound x the whole window (so, as with Kafka's window, a client that was
idle may burst one window's worth), and a request that takes it below zero is throttled for exactly
the time the refill needs to bring it back. A client sending without pause is held at its bound.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class TokenBucket:
    __slots__ = ("_clock", "_last", "_tokens", "window_s")

    def __init__(self, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self._clock = clock
        self._last = clock()
        self._tokens: float | None = None  # full until first used

    def _refill(self, bound: float) -> float:
        now = self._clock()
        capacity = bound * self.window_s
        tokens = capacity if self._tokens is None else min(capacity, self._tokens + bound * (now - self._last))
        self._tokens, self._last = tokens, now
        return tokens

    def record(self, value: float, bound: float) -> float:
        """Takes `value` out; returns the throttle in seconds (0 while the bucket is not empty)."""
        tokens = self._refill(bound) - value
        self._tokens = tokens
        return -tokens / bound if tokens < 0 else 0.0

    def unrecord(self, value: float) -> None:
        """Gives back what was taken for work not done (a throttled fetch answered empty)."""
        if self._tokens is not None:
            self._tokens += value

    def throttle_s(self, bound: float) -> float:
        """The pause the client owes now, without taking anything."""
        tokens = self._refill(bound)
        return -tokens / bound if tokens < 0 else 0.0

    def full(self, bound: float) -> bool:
        return self._refill(bound) >= bound * self.window_s
