"""A broker's client quotas: which bound applies to a request's client, its use, and the throttle.

Quotas are enforced by each broker on what it serves, as in Kafka (a cluster of N brokers lets a
client use N times its quota if its partitions are spread). Nothing is refused or dropped: the
request is done, the answer carries `throttle_time_ms`, and the connection is not read again until
the throttle has passed (KIP-219), so clients that ignore the field are held back all the same.
Followers' fetches are not client traffic and are never counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .entities import REQUEST_PERCENTAGE, EntityKey, SensorKey, applicable
from .rate import TokenBucket

PRUNE_EVERY_S = 60.0


class QuotaManager:
    def __init__(self, window_s: float, on_throttle: Callable[[str, SensorKey, float], None],
                 clock: Callable[[], float] = time.monotonic, request_throttle_max_s: float = 1.0) -> None:
        self.window_s = window_s  # quota.window.num x quota.window.size.seconds: what a bucket holds
        # Kafka bounds a request quota's throttle by quota.window.size.seconds (ClientRequestQuotaManager):
        # handler time is measured on the clock, so one request that a loaded machine left unscheduled
        # for 40 ms would otherwise mute a client at 0.1 % of a thread for 40 s.
        self.request_throttle_max_s = request_throttle_max_s
        self._on_throttle = on_throttle
        self._clock = clock
        self._quotas: dict[EntityKey, dict[str, float]] = {}
        self._types: frozenset[str] = frozenset()
        self._rates: dict[tuple[str, SensorKey], tuple[TokenBucket, float]] = {}  # and the bound it had
        self._resolved: dict[tuple[str, str, str], tuple[float, SensorKey] | None] = {}
        self._next_prune = 0.0

    def update(self, quotas: dict[EntityKey, dict[str, float]]) -> None:
        """The cluster's quotas changed (a new metadata snapshot)."""
        if quotas == self._quotas:
            return
        self._quotas = quotas
        self._types = frozenset(k for values in quotas.values() for k in values)
        self._resolved.clear()

    def limits(self, quota: str) -> bool:
        """Whether any entity sets this quota (nothing to look up per request otherwise)."""
        return quota in self._types

    def bound(self, quota: str, user: str, client_id: str) -> tuple[float, SensorKey] | None:
        if quota not in self._types:
            return None
        key = (quota, user, client_id)
        if key not in self._resolved:
            if len(self._resolved) > 100_000:
                self._resolved.clear()
            self._resolved[key] = applicable(self._quotas, user, client_id, quota)
        return self._resolved[key]

    def record(self, quota: str, user: str, client_id: str, value: float) -> float:
        """Counts `value` against the client's quota; returns the throttle in seconds (0: within it)."""
        found = self.bound(quota, user, client_id)
        if found is None:
            return 0.0
        bound, sensor = found
        throttle = self._bucket(quota, sensor, bound).record(value, bound)
        if quota == REQUEST_PERCENTAGE:
            throttle = min(throttle, self.request_throttle_max_s)
        if throttle > 0:
            self._on_throttle(quota, sensor, throttle)
        return throttle

    def unrecord(self, quota: str, user: str, client_id: str, value: float) -> None:
        found = self.bound(quota, user, client_id)
        if found is not None:
            self._bucket(quota, found[1], found[0]).unrecord(value)

    def exceeded(self, quota: str, user: str, client_id: str) -> float:
        """The throttle the client's rate calls for now, without recording (0: not over its bound)."""
        found = self.bound(quota, user, client_id)
        if found is None:
            return 0.0
        bound, sensor = found
        return self._bucket(quota, sensor, bound).throttle_s(bound)

    def _bucket(self, quota: str, sensor: SensorKey, bound: float) -> TokenBucket:
        now = self._clock()
        if now >= self._next_prune:
            self._prune(now)
        found = self._rates.get((quota, sensor))
        if found is None:
            bucket = TokenBucket(self.window_s, self._clock)
            self._rates[(quota, sensor)] = (bucket, bound)
            return bucket
        if found[1] != bound:
            self._rates[(quota, sensor)] = (found[0], bound)
        return found[0]

    def _prune(self, now: float) -> None:
        """Buckets of clients that were quiet long enough to refill hold nothing: dropped."""
        self._next_prune = now + PRUNE_EVERY_S
        for key in [k for k, (bucket, bound) in self._rates.items() if bucket.full(bound)]:
            del self._rates[key]
