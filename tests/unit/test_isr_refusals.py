"""A leader asks the controller to add a caught-up follower to the ISR at most once per refusal
that teaches it nothing: followers fetch every few milliseconds, and each fetch may ask again.

The controller here is a stand-in: the refusals it gives (a partition epoch the leader cannot
apply yet) happen in a real cluster only in narrow windows that cannot be produced on demand."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest
from dm_broker.config import BrokerConfig, TopicSettings
from dm_broker.controller.models import AlterIsrRequest, AlterIsrResponse, PartitionState
from dm_broker.log.partition_log import PartitionLog
from dm_broker.replication.manager import ReplicaManager
from dm_broker.replication.partition import Partition
from group_clients import wait_for_async


class RefusingController:
    def __init__(self, state: PartitionState) -> None:
        self.state = state
        self.requests: list[AlterIsrRequest] = []

    async def alter_isr_batch(self, reqs: list[AlterIsrRequest]) -> list[AlterIsrResponse]:
        self.requests += reqs
        return [AlterIsrResponse(error="invalid_update_version", state=self.state) for _ in reqs]


def leader_of(tmp_path: Path) -> Partition:
    settings = TopicSettings(BrokerConfig.build({}, environ={}), {})
    plog = PartitionLog(tmp_path / "t-0", "t", 0, settings)
    plog.open()
    part = Partition("t", 0, plog, node_id=1)
    part.become_leader(leader_epoch=5, partition_epoch=9, replicas=[1, 0, 2], isr=[1, 0])
    return part


async def expansions_asked(tmp_path: Path, controller_partition_epoch: int, fetches: int) -> list[int]:
    """The partition epochs of the ISR expansions a leader in partition epoch 9 asks for while a
    caught-up follower fetches `fetches` times and the controller refuses each."""
    part = leader_of(tmp_path)
    controller = RefusingController(PartitionState(replicas=[1, 0, 2], leader=1, isr=[1, 0], leader_epoch=5,
                                                   partition_epoch=controller_partition_epoch))
    manager = ReplicaManager(SimpleNamespace(node_id=1, broker_epoch=3, controller=controller), 30_000)
    try:
        for _ in range(fetches):
            manager.maybe_expand(part, 2)
            await asyncio.sleep(0.001)  # the refusal comes back between two fetches
        assert part.isr == [1, 0] and part.pending_isr is None
        return [r.partition_epoch for r in controller.requests]
    finally:
        part.log.close()


async def test_a_refusal_that_changes_nothing_is_not_asked_again_at_every_fetch(tmp_path: Path) -> None:
    # The controller's state is older than what the leader knows: the leader cannot apply it.
    assert await expansions_asked(tmp_path, controller_partition_epoch=8, fetches=50) == [9]


async def test_a_refusal_that_brings_a_newer_partition_epoch_is_retried_with_it(tmp_path: Path) -> None:
    assert await expansions_asked(tmp_path, controller_partition_epoch=10, fetches=2) == [9, 10]


async def test_acks_all_appends_refuse_below_min_insync_replicas(tmp_path: Path) -> None:
    """Coordinator writes (append_internal) as produce with acks=all: nothing is written while the ISR
    is below min.insync.replicas, and a write whose ISR shrank below it while waiting is reported as
    such (NOT_ENOUGH_REPLICAS_AFTER_APPEND), never as committed."""
    from dm_broker.log.records import build_batch
    from dm_broker.replication.partition import NotEnoughReplicasError

    settings = TopicSettings(BrokerConfig.build({}, environ={}), {"min.insync.replicas": "2"})
    plog = PartitionLog(tmp_path / "t-0", "t", 0, settings)
    plog.open()
    part = Partition("t", 0, plog, node_id=1)
    try:
        part.become_leader(leader_epoch=1, partition_epoch=1, replicas=[1, 0], isr=[1])
        batch = bytearray(build_batch([(b"k", b"v", [])], timestamp_ms=0))
        with pytest.raises(NotEnoughReplicasError) as refused:
            await part.append_internal(batch)
        assert not refused.value.after_append and plog.log_end_offset == 0
        part.become_leader(leader_epoch=1, partition_epoch=2, replicas=[1, 0], isr=[1, 0])
        waiting = asyncio.ensure_future(part.append_internal(bytearray(batch)))
        # The append waits for the new partition epoch's file write (a worker thread) first, which
        # on a loaded machine takes longer than any fixed sleep.
        await wait_for_async(lambda: plog.log_end_offset >= 1, 5, interval=0.01, what="the append")
        assert not waiting.done()  # the follower has not fetched it
        part.update_follower(0, plog.log_end_offset)
        await asyncio.wait_for(waiting, 5)  # committed by both
        waiting = asyncio.ensure_future(part.append_internal(bytearray(batch)))
        await wait_for_async(lambda: plog.log_end_offset >= 2, 5, interval=0.01, what="the append")
        part.isr = [1]  # the controller removed the follower meanwhile: the leader alone advances the HW
        part.maybe_advance_hw()
        with pytest.raises(NotEnoughReplicasError) as after:
            await asyncio.wait_for(waiting, 5)
        assert after.value.after_append
    finally:
        plog.close()
