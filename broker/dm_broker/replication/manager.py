"""Turns controller metadata into replica roles on this broker, runs the follower fetchers and
keeps the ISR of the partitions this broker leads (shrink after replica.lag.time.max.ms, expand
when a follower caught up), always through the controller's compare-and-set."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from ..controller.client import ControllerUnavailable
from ..controller.controller import ControllerError
from ..controller.models import AlterIsrRequest
from ..tasks import stop_tasks
from .fetcher import ReplicaFetcher
from .partition import LEADER, Partition

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger(__name__)

EXPAND_REFUSED_BACKOFF_S = 1.0


class ReplicaManager:
    def __init__(self, broker: Broker, lag_time_max_ms: int) -> None:
        self.broker = broker
        self.lag_max = lag_time_max_ms / 1000
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._following: dict[tuple[str, int], int] = {}
        self._task: asyncio.Task[None] | None = None
        self._isr_tasks: set[asyncio.Task[None]] = set()
        # (topic, partition, replica) -> until when an ISR expansion the controller refused (a
        # replica that is shutting down or fenced, or a refusal that left our state as it was) is
        # not asked for again: a caught-up follower fetches every few milliseconds.
        self._expand_refused: dict[tuple[str, int, int], float] = {}

    def start(self) -> None:
        self._task = asyncio.create_task(self._isr_loop())

    async def close(self) -> None:
        await stop_tasks(self._task, *self._isr_tasks)
        for fetcher in self.fetchers.values():
            await fetcher.close()

    def follow(self, part: Partition, leader_id: int) -> None:
        key = (part.topic, part.index)
        current = self._following.get(key)
        if current is not None and current != leader_id:
            self.fetchers[current].remove(part)
        self._following[key] = leader_id
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            fetcher = self.fetchers[leader_id] = ReplicaFetcher(self.broker, leader_id)
        fetcher.add(part)  # (re)truncates first: the leader epoch changed

    def stop_following(self, part: Partition) -> None:
        key = (part.topic, part.index)
        leader = self._following.pop(key, None)
        if leader is not None and leader in self.fetchers:
            self.fetchers[leader].remove(part)

    # -- ISR -------------------------------------------------------------------------------

    async def _isr_loop(self) -> None:
        while True:
            await asyncio.sleep(max(0.05, self.lag_max / 4))
            for part in list(self.broker.partitions.values()):
                if part.role != LEADER or part.pending_isr is not None or part.closed:
                    continue
                stale = part.stale_followers(self.lag_max)
                if stale:
                    new_isr = [r for r in part.isr if r not in stale]
                    log.info("%s-%d: followers %s fell behind for %.1fs; shrinking ISR", part.topic, part.index,
                             stale, self.lag_max)
                    self.request_isr_change(part, new_isr)

    def maybe_expand(self, part: Partition, replica: int) -> None:
        if part.pending_isr is None and replica not in part.isr:
            refused_until = self._expand_refused.get((part.topic, part.index, replica))
            if refused_until is not None:
                if time.monotonic() < refused_until:
                    return
                del self._expand_refused[(part.topic, part.index, replica)]
            self.request_isr_change(part, [*part.isr, replica])

    def request_isr_change(self, part: Partition, new_isr: list[int]) -> None:
        part.pending_isr = [r for r in new_isr if r not in part.isr]  # additions count for the HW at once
        task = asyncio.create_task(self._alter_isr(part, new_isr))
        self._isr_tasks.add(task)
        task.add_done_callback(self._isr_tasks.discard)

    async def _alter_isr(self, part: Partition, new_isr: list[int]) -> None:
        req = AlterIsrRequest(node_id=self.broker.node_id, broker_epoch=self.broker.broker_epoch, topic=part.topic,
                              partition=part.index, leader_epoch=part.leader_epoch,
                              partition_epoch=part.partition_epoch, new_isr=new_isr)
        try:
            resp = await self.broker.controller.alter_isr(req)
        except (ControllerUnavailable, ControllerError) as exc:
            log.warning("%s-%d: ISR change to %s not possible: %s", part.topic, part.index, new_isr, exc)
            part.pending_isr = None
            return
        except Exception:  # a change left pending would block every later one of this partition
            log.exception("%s-%d: ISR change to %s failed", part.topic, part.index, new_isr)
            part.pending_isr = None
            return
        if resp.error is None and resp.state is not None:
            part.update_isr(resp.state.isr, resp.state.partition_epoch)
            log.info("%s-%d: ISR is now %s", part.topic, part.index, resp.state.isr)
        else:
            log.info("%s-%d: ISR change to %s refused: %s", part.topic, part.index, new_isr, resp.error)
            adding = part.pending_isr or ()
            part.pending_isr = None
            epoch_before = part.partition_epoch
            if resp.state is not None and resp.state.leader == part.node_id and \
                    resp.state.leader_epoch == part.leader_epoch:
                part.update_isr(resp.state.isr, resp.state.partition_epoch)
            # Asking again at the next fetch is right only when the refusal taught us something (a
            # newer partition epoch); otherwise the same request would be refused again, at every
            # fetch of a caught-up follower (a replica shutting down, or a state we cannot apply
            # until our metadata catches up).
            if resp.error == "ineligible_replica" or part.partition_epoch == epoch_before:
                for replica in adding:
                    self._expand_refused[(part.topic, part.index, replica)] = \
                        time.monotonic() + EXPAND_REFUSED_BACKOFF_S
