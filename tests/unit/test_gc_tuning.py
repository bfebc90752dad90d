"""Long-lived objects are frozen out of the cyclic collector's way (issue 31, ADR 0040): at 10,000
partitions the collections that visited a broker's partitions held its event loop for 0.2-0.46 s.
Freezing is safe only because nothing retired needs the collector: a real Broker with real logs hosts
partitions, retires them with the collector off, and every one of them is freed anyway."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
from dm_broker import broker as broker_module
from dm_broker.broker import Broker
from dm_broker.config import BrokerConfig
from dm_broker.gc_tuning import LongLivedObjects, freeze_as_it_grows
from dm_broker.log.partition_log import PartitionLog
from dm_broker.log.segment import Segment
from dm_broker.replication.partition import Partition
from test_metadata_in_steps import snapshot


@pytest.fixture(autouse=True)
def unfrozen_afterwards() -> Iterator[None]:
    """The test process's frozen objects go back to the collector, so nothing here outlives its test."""
    yield
    gc.unfreeze()


def tracked(cls: type, under: Path | None = None) -> int:
    """Instances the collector would visit (a frozen object is not among them), those of the logs
    under `under` only if given (an earlier test's broker may still wait for the collector)."""
    return sum(1 for o in gc.get_objects() if type(o) is cls and (under is None or under in log_dir(o).parents))


def log_dir(o: object) -> Path:
    return o.log.directory if isinstance(o, Partition) else o.directory if isinstance(o, PartitionLog) \
        else o.path.parent  # type: ignore[attr-defined]


def new_broker(tmp_path: Path) -> Broker:
    config = BrokerConfig.build({"node.id": 0, "log.dirs": str(tmp_path / "data")}, environ={})
    return Broker(config, controller=None)  # type: ignore[arg-type]  # never called here


def test_freezes_only_when_the_count_grew() -> None:
    long_lived = LongLivedObjects(5)
    before = gc.get_freeze_count()
    assert not long_lived.settle(5) and not long_lived.settle(3)
    assert gc.get_freeze_count() == before and long_lived.freezes == 0
    young = [[i] for i in range(1000)]  # tracked objects made by the "step"
    assert long_lived.settle(4)  # grew from 3
    assert gc.get_freeze_count() >= before + len(young) and long_lived.freezes == 1


async def test_each_metadata_step_freezes_what_it_hosted(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(broker_module, "PARTITIONS_PER_STEP", 40)
    broker = new_broker(tmp_path)
    frozen_at_steps = []
    real_settle = broker.long_lived.settle

    def settle(count: int) -> bool:
        froze = real_settle(count)
        frozen_at_steps.append((count, froze, tracked(Partition)))
        return froze

    broker.long_lived.settle = settle  # type: ignore[method-assign]
    try:
        await broker._apply_in_steps(snapshot(1, 100, leader=0, epoch=1))
        # Steps end before the 40th and 80th new partition; each step's partitions are frozen then.
        assert frozen_at_steps == [(39, True, 0), (79, True, 0), (100, True, 0)]
        assert len(broker.partitions) == 100 and tracked(Partition) == 0
        frozen_at_steps.clear()
        md = snapshot(2, 100, leader=0, epoch=1)
        md.topics["t"] = broker.metadata.topics["t"]  # nothing new hosted: nothing frozen
        await broker._apply_in_steps(md)
        assert frozen_at_steps == [(100, False, 0)]
    finally:
        await broker.replicas.close()


@pytest.mark.parametrize("leader", [0, 1], ids=["leader", "follower"])
async def test_retired_partitions_need_no_collector(tmp_path: Path, leader: int) -> None:
    broker = new_broker(tmp_path)
    try:
        broker.apply_metadata(snapshot(1, 50, leader=leader, epoch=1))
        await asyncio.sleep(0.2)  # leaders' epoch writes and followers' fetchers get going
        assert tracked(Partition, tmp_path) == 50
        gc.collect()
        gc.disable()
        try:
            retired = snapshot(2, 0, leader=leader, epoch=1)
            retired.topics.clear()
            broker.apply_metadata(retired)
            await asyncio.sleep(0.5)  # the fetchers stop
            left = (tracked(Partition, tmp_path), tracked(PartitionLog, tmp_path), tracked(Segment, tmp_path))
        finally:
            gc.enable()
        gc.collect()
        # What reference counting did not free is still referred to (the collector finds nothing of
        # it either): no retired partition waits for the collector, so a frozen one is not leaked.
        assert left == (tracked(Partition, tmp_path), tracked(PartitionLog, tmp_path), tracked(Segment, tmp_path))
        assert left[0] <= 1  # at most the one a finished step's frame last named, until it is replaced
    finally:
        await broker.replicas.close()


async def test_the_controller_freezes_once_its_partitions_grew() -> None:
    count = 10
    before = gc.get_freeze_count()
    task = asyncio.create_task(freeze_as_it_grows(lambda: count, every_s=0.01))
    try:
        await asyncio.sleep(0.05)
        assert gc.get_freeze_count() == before  # nothing grew
        count = 20
        young = [[i] for i in range(1000)]
        await asyncio.sleep(0.05)
        assert gc.get_freeze_count() >= before + len(young)
    finally:
        task.cancel()


class Held:
    """Something long-lived that ends up in a reference cycle (as a stopped controller's objects do through
    its tasks' tracebacks)."""

    def __init__(self) -> None:
        self.me = self


def test_release_frees_cycles_among_frozen_objects() -> None:
    held = Held()
    alive = weakref.ref(held)
    LongLivedObjects(0).settle(1)  # frozen, as a grown controller's objects are
    del held
    gc.collect()
    assert alive() is not None, "a cycle among frozen objects is out of the collector's reach"
    long_lived = LongLivedObjects(1)
    still_needed = [Held()]
    long_lived.release()
    assert alive() is None and long_lived.releases == 1
    assert gc.get_freeze_count() > 0 and still_needed[0].me is still_needed[0]  # what is alive is frozen again
