"""One active operator: leader election on a `coordination.k8s.io/v1` Lease, the way client-go's
leaderelection does it (ADR 0018). Only the holder hosts the clusters' controllers; a standby polls
the Lease and takes it over when the holder released it or stopped renewing it for a lease duration.

Expiry is judged by the standby's own clock — how long the Lease has stayed unchanged since it was
last seen — never by comparing another machine's timestamps, so clock skew cannot cut a lease short.
A holder that cannot renew within its renew deadline (shorter than the lease duration) gives up
leadership before anyone may take it over."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from .kube import ApiError, Kube
from .objects import Obj

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ElectionTiming:
    lease_duration_s: float = 15.0  # a standby waits this long after the last renewal it saw
    renew_deadline_s: float = 10.0  # a holder that could not renew for this long stops leading
    retry_period_s: float = 2.0  # how often a standby looks and a holder renews

    def __post_init__(self) -> None:
        if not self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError("leader election needs retry period < renew deadline < lease duration")


@dataclass(frozen=True)
class Observation:
    """The Lease as this instance last saw it change, and when (its monotonic clock)."""

    record: tuple[str, str, str]  # holder, renew time, transitions: any change is a sign of life
    seen_at: float


def holder_of(lease: Obj | None) -> str:
    return ((lease or {}).get("spec") or {}).get("holderIdentity") or ""


def record_of(lease: Obj) -> tuple[str, str, str]:
    spec = lease.get("spec") or {}
    return holder_of(lease), str(spec.get("renewTime", "")), str(spec.get("leaseTransitions", 0))


def may_take(lease: Obj, identity: str, seen: Observation | None, now: float, timing: ElectionTiming) -> bool:
    """Whether `identity` may write itself into the Lease: it holds it already, nobody does (released),
    or the record has not changed for a whole lease duration of this instance's watching."""
    holder = holder_of(lease)
    if holder in ("", identity):
        return True
    if seen is None or seen.record != record_of(lease):
        return False
    return now - seen.seen_at >= timing.lease_duration_s


def micro_time(at: float | None = None) -> str:
    """Kubernetes' MicroTime format."""
    return datetime.fromtimestamp(time.time() if at is None else at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def claimed(lease: Obj, identity: str, timing: ElectionTiming) -> Obj:
    """The Lease body with `identity` as its holder (a renewal keeps the acquire time)."""
    spec = dict(lease.get("spec") or {})
    now = micro_time()
    if holder_of(lease) != identity:
        spec["acquireTime"] = now
        spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if holder_of(lease) else 0)
    spec.update(holderIdentity=identity, leaseDurationSeconds=int(timing.lease_duration_s), renewTime=now)
    return {**lease, "spec": spec}


class LeaderElector:
    def __init__(self, kube: Kube, namespace: str, name: str, identity: str,
                 timing: ElectionTiming | None = None) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timing = timing or ElectionTiming()
        self.leading = False
        self._seen: Observation | None = None
        self._last_renewal = 0.0
        self._written: Obj | None = None  # the Lease as this instance's last write returned it

    @property
    def epoch(self) -> int:
        """The Lease's leaseTransitions as this instance last wrote it: the controller epoch."""
        return int(((self._written or {}).get("spec") or {}).get("leaseTransitions") or 0)

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

    async def _try(self) -> bool:
        """One attempt to acquire or renew; False when another instance holds the Lease or the write
        lost a race (the resourceVersion makes the write conditional). A holder renews from the Lease its
        last write returned — one call per renewal; a conflict means someone else wrote it."""
        if self._written is not None and holder_of(self._written) == self.identity:
            try:
                self._written = await self.kube.replace(self.path, claimed(self._written, self.identity, self.timing))
                return True
            except ApiError as exc:
                self._written = None
                if exc.status not in (404, 409):
                    raise
        lease = await self.kube.get_or_none(self.path)
        if lease is None:
            body = claimed({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                            "metadata": {"name": self.name, "namespace": self.namespace}}, self.identity, self.timing)
            try:
                self._written = await self.kube.create(self.path.rsplit("/", 1)[0], body)
                return True
            except ApiError as exc:
                if exc.status == 409:
                    return False
                raise
        now = time.monotonic()
        if self._seen is None or self._seen.record != record_of(lease):
            self._seen = Observation(record_of(lease), now)
        if not may_take(lease, self.identity, self._seen, now, self.timing):
            return False
        try:
            self._written = await self.kube.replace(self.path, claimed(lease, self.identity, self.timing))
            return True
        except ApiError as exc:
            if exc.status == 409:
                return False
            raise

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Waits until this instance leads (True) or `stop` is set (False)."""
        announced = False
        while not stop.is_set():
            try:
                if await self._try():
                    self.leading = True
                    self._last_renewal = time.monotonic()
                    log.info("leading: holds Lease %s/%s as %s", self.namespace, self.name, self.identity)
                    return True
            except (ApiError, OSError) as exc:
                log.warning("cannot read or take Lease %s/%s: %s", self.namespace, self.name, exc)
            if not announced:
                log.info("standing by: Lease %s/%s is held by %s", self.namespace, self.name,
                         self._seen.record[0] if self._seen else "another instance")
                announced = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.timing.retry_period_s)
        return False

    async def keep(self, on_lost: Callable[[str], None]) -> None:
        """Renews every retry period; calls `on_lost` (and returns) once renewals have failed for the
        renew deadline or another instance holds the Lease."""
        while True:
            await asyncio.sleep(self.timing.retry_period_s)
            try:
                if await self._try():
                    self._last_renewal = time.monotonic()
                    continue
                why = f"Lease {self.namespace}/{self.name} is now held by {self._seen.record[0] if self._seen else '?'}"
            except (ApiError, OSError) as exc:
                if time.monotonic() - self._last_renewal < self.timing.renew_deadline_s:
                    log.warning("renewing Lease %s/%s failed (will retry): %s", self.namespace, self.name, exc)
                    continue
                why = (f"could not renew Lease {self.namespace}/{self.name} for "
                       f"{self.timing.renew_deadline_s:.0f}s: {exc}")
            self.leading = False
            on_lost(why)
            return

    async def release(self) -> None:
        """Gives the Lease up at a clean stop, so a standby takes over at its next look instead of
        after a lease duration."""
        if not self.leading:
            return
        self.leading = False
        with contextlib.suppress(ApiError, OSError):
            lease = await self.kube.get(self.path)
            if holder_of(lease) == self.identity:
                spec = {**lease["spec"], "holderIdentity": None, "leaseDurationSeconds": 1}
                await self.kube.replace(self.path, {**lease, "spec": spec})
                log.info("released Lease %s/%s", self.namespace, self.name)


LEADER_LABEL = "dm.dev/operator-leader"


async def mark_pod(kube: Kube, namespace: str, pod: str, leading: bool) -> None:
    """The operator Service selects the pod labelled leader: brokers' controller requests reach the
    instance that hosts the controllers, while every healthy instance stays Ready (a Deployment rollout
    waits for readiness, so a standby must be Ready)."""
    await kube.patch(f"/api/v1/namespaces/{namespace}/pods/{pod}",
                     {"metadata": {"labels": {LEADER_LABEL: "true" if leading else None}}})
