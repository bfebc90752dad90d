"""What keeps logins from stalling a broker (issue 30): password hashing (PLAIN checked against a SCRAM
credential runs PBKDF2, 4,096+ rounds) happens in a small thread pool, never on the event loop, and
recent failures slow down the next attempts of the same user name and of the same client address.

Costly attempts for one user name, and from one client address, are checked one at a time, each after
a delay that grows with the failures of that name or address in the last minute beyond a few free ones
(a correct password still succeeds, later). At most MAX_WAITING of them wait in line per name or
address; more are refused at once without a check (TooManyAttempts). Cheap checks (SCRAM proofs,
JAAS passwords) do not wait. A burst of guesses over hundreds
of connections so costs the broker a handful of hashes instead of one per connection, and connections
that are already authenticated never wait for any of it."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections import Counter, defaultdict, deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from .scram import ScramCredential, verify_password

T = TypeVar("T")

WINDOW_S = 60.0
FREE_FAILURES = 3  # failures per user name or address within the window before attempts slow down
BASE_DELAY_S = 0.25
MAX_DELAY_S = 10.0
MAX_WAITING = 16  # attempts in line per user name or address; more are refused at once, unchecked
MATCHED_KEPT = 10_000  # passwords remembered as matching (then forgotten all at once)
HASHING_THREADS = 2  # hashlib's PBKDF2 releases the GIL: two threads use the second core, no more


class TooManyAttempts(Exception):
    """More attempts for a user name or from an address are waiting than MAX_WAITING."""


class FailureTracker:
    """Recent authentication failures per key (a user name, a client address)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._failures: dict[str, deque[float]] = defaultdict(deque)

    def _recent(self, key: str) -> int:
        times = self._failures.get(key)
        if not times:
            return 0
        cutoff = self.clock() - WINDOW_S
        while times and times[0] < cutoff:
            times.popleft()
        if not times:
            del self._failures[key]
            return 0
        return len(times)

    def record(self, *keys: str) -> None:
        now = self.clock()
        for key in keys:
            self._recent(key)
            self._failures[key].append(now)

    def delay(self, *keys: str) -> float:
        """How long the next attempt for these keys waits before its password is checked."""
        excess = max((self._recent(k) for k in keys), default=0) - FREE_FAILURES
        if excess <= 0:
            return 0.0
        return min(BASE_DELAY_S * 2 ** (excess - 1), MAX_DELAY_S)


class LoginGuard:
    """One per broker: shared by every listener and connection."""

    def __init__(self) -> None:
        self.failures = FailureTracker()
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._users: Counter[str] = Counter()  # attempts holding or waiting for each key's lock
        self._pool = ThreadPoolExecutor(HASHING_THREADS, thread_name_prefix="dm-hash")
        self._queue = asyncio.Semaphore(HASHING_THREADS * 8)  # bounded work queued behind the threads
        self._matched: set[tuple[bytes, tuple]] = set()  # (sha256 of a password, the credential it matched)

    @staticmethod
    def keys(user: str, host: str) -> tuple[str, str]:
        return f"user:{user}", f"host:{host}"

    @contextlib.asynccontextmanager
    async def attempt(self, user: str, host: str, costly: bool) -> AsyncIterator[None]:
        """One password check for `user` from `host`. A costly one (a PBKDF2: PLAIN against a SCRAM
        credential) waits for the ones before it for the same name or address and for the delay their
        recent failures call for, so guesses cannot queue up hashes. A cheap one (a SCRAM proof, a
        PLAIN password from the listener's JAAS, an unknown user) does not wait: a storm of guesses at
        a user name never holds up that user's own SCRAM logins, and clients behind one address (NAT)
        are not slowed by each other's typos."""
        keys = self.keys(user, host)
        if not costly:  # a few HMACs: connection.failed.authentication.delay.ms is enough
            yield
            return
        if any(self._users[key] >= MAX_WAITING for key in keys):
            self.failures.record(*keys)
            raise TooManyAttempts(f"too many authentication attempts for {user!r} or from {host} at once")
        for key in keys:
            self._users[key] += 1
        try:
            async with self._locks[keys[0]], self._locks[keys[1]]:  # always in this order: no deadlock
                wait = self.failures.delay(*keys)
                if wait > 0:
                    await asyncio.sleep(wait)
                yield
        finally:
            for key in keys:
                self._users[key] -= 1
                if self._users[key] <= 0:
                    del self._users[key]
                    self._locks.pop(key, None)

    def failed(self, user: str, host: str) -> None:
        self.failures.record(*self.keys(user, host))

    async def password_matches(self, credential: ScramCredential, password: str) -> bool:
        """A PLAIN password against a SCRAM credential: a PBKDF2 off the event loop, remembered when it
        matched, so a client that logs in on every request (HTTP Basic) or reconnects often does not pay
        it each time; a changed or deleted credential no longer matches what was remembered."""
        key = (hashlib.sha256(password.encode()).digest(), credential.raw())
        if key in self._matched:
            return True
        ok = await self.hash(verify_password, credential, password)
        if ok:
            if len(self._matched) >= MATCHED_KEPT:
                self._matched.clear()
            self._matched.add(key)
        return ok

    async def hash(self, fn: Callable[..., T], *args: object) -> T:
        """Runs a password hash off the event loop, at most HASHING_THREADS at once."""
        async with self._queue:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
