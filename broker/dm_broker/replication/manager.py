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
from ..controller.models import AlterIsrRequest, AlterIsrResponse
from ..tasks import stop_tasks
from .fetcher import ReplicaFetcher
from .partition import LEADER, Partition

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger(__name__)

EXPAND_REFUSED_BACKOFF_S = 1.0
ISR_BATCH_MAX = 1000  # ISR changes per request to the controller
ISR_RETRY_S = 0.5  # after a batch the controller did not answer


class ReplicaManager:
    def __init__(self, broker: Broker, lag_time_max_ms: int) -> None:
        self.broker = broker
        self.lag_max = lag_time_max_ms / 1000
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._following: dict[tuple[str, int], int] = {}
        self._task: asyncio.Task[None] | None = None
        # ISR changes waiting to be sent, one per partition, sent in batches with one batch in flight:
        # a broker back from a restart asks to rejoin thousands of ISRs at once, and one request each
        # flooded the controller (its answers timed out, heartbeats with them, and brokers were fenced).
        self._isr_queue: dict[tuple[str, int], tuple[Partition, list[int], AlterIsrRequest]] = {}
        self._isr_sender: asyncio.Task[None] | None = None
        # (topic, partition, replica) -> until when an ISR expansion the controller refused (a
        # replica that is shutting down or fenced, or a refusal that left our state as it was) is
        # not asked for again: a caught-up follower fetches every few milliseconds.
        self._expand_refused: dict[tuple[str, int, int], float] = {}

    def start(self) -> None:
        self._task = asyncio.create_task(self._isr_loop())

    async def close(self) -> None:
        await stop_tasks(self._task, self._isr_sender)
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
                    log.info("%s-%d: followers %s not caught up for more than %.1fs (%s); shrinking ISR",
                             part.topic, part.index, stale, self.lag_max, part.lag_report(stale))
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
        self._isr_queue[(part.topic, part.index)] = (part, new_isr, AlterIsrRequest(
            node_id=self.broker.node_id, broker_epoch=self.broker.broker_epoch, topic=part.topic,
            partition=part.index, leader_epoch=part.leader_epoch, partition_epoch=part.partition_epoch,
            new_isr=new_isr))
        if self._isr_sender is None or self._isr_sender.done():
            self._isr_sender = asyncio.create_task(self._send_isr_changes())

    async def _send_isr_changes(self) -> None:
        while self._isr_queue:
            keys = list(self._isr_queue)[:ISR_BATCH_MAX]
            batch = [self._isr_queue.pop(key) for key in keys]
            try:
                answers = await self.broker.controller.alter_isr_batch([req for _, _, req in batch])
            except (ControllerUnavailable, ControllerError) as exc:
                log.warning("ISR changes of %d partitions not possible: %s", len(batch), exc)
                answers = None
            except Exception:  # a change left pending would block every later one of its partition
                log.exception("ISR changes of %d partitions failed", len(batch))
                answers = None
            for i, (part, new_isr, _) in enumerate(batch):
                if answers is None:
                    part.pending_isr = None
                else:
                    self._isr_answered(part, new_isr, answers[i])
            if answers is None:
                await asyncio.sleep(ISR_RETRY_S)  # the changes still wanted are asked for again meanwhile

    def _isr_answered(self, part: Partition, new_isr: list[int], resp: AlterIsrResponse) -> None:
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
