"""A scrape copies the broker's state on the event loop and builds the Prometheus text in a worker
thread: at 10,000 partitions the text is ~50,000 samples, which would otherwise stall the loop in one
piece on every scrape (issue 31). A real Broker with real logs on disk."""

from __future__ import annotations

import asyncio
import itertools
import threading
from pathlib import Path

from dm_broker import metrics
from dm_broker.broker import Broker
from dm_broker.config import BrokerConfig
from dm_broker.controller.models import BrokerInfo, ClusterMetadata, PartitionState, TopicDoc
from dm_broker.metrics import _StateCollector
from prometheus_client.parser import text_string_to_metric_families

TOPIC_ID = "6a0fe9b8-3c2e-4f0e-9a41-0d8e7f8e2f10"


def metadata(partitions: int) -> ClusterMetadata:
    states = [PartitionState(replicas=[0], leader=0, isr=[0], leader_epoch=0, partition_epoch=0)
              for _ in range(partitions)]
    return ClusterMetadata(version=1, incarnation="c1", cluster_id="cluster",
                           brokers=[BrokerInfo(node_id=0, host="127.0.0.1", port=1, epoch=1)],
                           topics={"t": TopicDoc(name="t", topic_id=TOPIC_ID, partitions=states)})


async def test_a_scrape_builds_its_text_off_the_loop_from_state_copied_on_it(tmp_path: Path, monkeypatch) -> None:
    config = BrokerConfig.build({"node.id": 0, "log.dirs": str(tmp_path / "data")}, environ={})
    broker = Broker(config, controller=None)  # type: ignore[arg-type]  # never called here
    loop_thread = threading.get_ident()
    calls: list[tuple[int, bool]] = []
    collect = _StateCollector.collect

    def recording(self: _StateCollector):
        calls.append((threading.get_ident(), self.taken is not None))
        return collect(self)

    monkeypatch.setattr(_StateCollector, "collect", recording)
    try:
        broker.apply_metadata(metadata(200))
        await broker.partition("t", 7).append_as_leader(*_batch())
        text = (await broker.metrics.exposition()).decode()
        assert calls and all(thread != loop_thread and taken for thread, taken in calls)
        assert broker.metrics.state.taken is None  # a later collect outside a scrape copies afresh

        ends = {s.labels["partition"]: s.value for f in text_string_to_metric_families(text)
                if f.name == "dm_log_end_offset" for s in f.samples}
        assert len(ends) == 200 and ends["7"] == 3 and ends["8"] == 0
        sessions = [s.value for f in text_string_to_metric_families(text) if f.name == "dm_fetch_sessions"
                    for s in f.samples]
        assert sessions == [0]
    finally:
        await broker.replicas.close()


async def test_a_scrape_copies_the_partitions_in_steps_with_the_loop_turning_between(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    """At 10,000 partitions the copy itself held the loop in one piece: it now goes PARTITIONS_PER_STEP
    partitions at a time, other callbacks run between the steps, and a partition retired meanwhile is left
    out rather than read."""
    config = BrokerConfig.build({"node.id": 0, "log.dirs": str(tmp_path / "data")}, environ={})
    broker = Broker(config, controller=None)  # type: ignore[arg-type]  # never called here
    monkeypatch.setattr(metrics, "PARTITIONS_PER_STEP", 50)
    steps: list[tuple[int, int]] = []
    turns: list[int] = []
    add = _StateCollector._add_partitions

    def recording(state, parts) -> None:  # type: ignore[no-untyped-def]
        steps.append((len(parts), len(turns)))
        if len(steps) == 2:
            broker.partition("t", 180).close()  # retired while the copy is under way
        add(state, parts)

    monkeypatch.setattr(_StateCollector, "_add_partitions", staticmethod(recording))

    async def other_callbacks() -> None:
        while True:
            turns.append(1)
            await asyncio.sleep(0)

    try:
        broker.apply_metadata(metadata(200))
        ticker = asyncio.get_running_loop().create_task(other_callbacks())
        await asyncio.sleep(0)
        text = (await broker.metrics.exposition()).decode()
        ticker.cancel()
        assert [size for size, _ in steps] == [50, 50, 50, 50]
        assert all(earlier < later for (_, earlier), (_, later) in itertools.pairwise(steps)), steps
        ends = {s.labels["partition"] for f in text_string_to_metric_families(text)
                if f.name == "dm_log_end_offset" for s in f.samples}
        assert len(ends) == 199 and "180" not in ends
    finally:
        await broker.replicas.close()


def _batch() -> tuple[bytes, list]:
    from dm_broker.log.records import validate_batches
    from wire import batch

    data = batch([b"a", b"b", b"c"])
    return data, validate_batches(data, 1 << 20)
