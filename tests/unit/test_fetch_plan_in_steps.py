"""A follower's full refresh of its fetch plan (every REFRESH_S, the safety net behind the plan it keeps
for touched partitions) works PARTITIONS_PER_STEP partitions between two turns of the event loop, and what changes
meanwhile is in the plan it ends with (issue 31: a follower of 3,333 partitions held its loop for a tenth
of a second with it). A real Broker with real logs on disk, following a leader that is not there."""

from __future__ import annotations

from pathlib import Path

from dm_broker.broker import Broker
from dm_broker.config import BrokerConfig
from dm_broker.controller.models import BrokerInfo, ClusterMetadata, PartitionState, TopicDoc
from dm_broker.replication import fetcher as fetcher_module
from loop_turns import counting_turns


def followed(partitions: int) -> ClusterMetadata:
    states = [PartitionState(replicas=[0, 1], leader=1, isr=[0, 1], leader_epoch=1, partition_epoch=1)
              for _ in range(partitions)]
    return ClusterMetadata(
        version=1, incarnation="c1", cluster_id="cluster",
        brokers=[BrokerInfo(node_id=i, host="127.0.0.1", port=1, epoch=1) for i in range(2)],
        topics={"t": TopicDoc(name="t", topic_id="6a0fe9b8-3c2e-4f0e-9a41-0d8e7f8e2f10", partitions=states)})


async def test_a_full_refresh_turns_the_loop_and_keeps_what_changed_meanwhile(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(fetcher_module, "PARTITIONS_PER_STEP", 40)
    config = BrokerConfig.build({"node.id": 0, "log.dirs": str(tmp_path / "data")}, environ={})
    broker = Broker(config, controller=None)  # type: ignore[arg-type]  # never called here
    try:
        broker.apply_metadata(followed(100))
        fetcher = broker.replicas.fetchers[1]
        await fetcher.close()  # its own task would only retry the absent leader; the refresh is asked here
        fetcher.needs_truncation.clear()  # as after truncation: every partition is ready to fetch
        ready = list(fetcher.partitions.values())
        gone, retruncated = ready[-1], ready[0]

        def meanwhile() -> None:  # while the refresh is under way: one partition leaves, one gets a new
            fetcher.remove(gone)  # leader epoch and must be truncated again before it is fetched
            fetcher.add(retruncated)

        async with counting_turns(on_first=meanwhile) as turns:
            wanted = await fetcher._all_wanted(ready, set(), 0)
        assert turns.count >= 2, "the loop turned between the steps"
        assert (gone.topic, gone.index) not in wanted and (retruncated.topic, retruncated.index) not in wanted
        assert len(wanted) == 98 and all(w.fetch_offset == 0 for w in wanted.values())
        assert not fetcher._touched, "what was touched meanwhile is in the plan, not left for later"
    finally:
        await broker.replicas.close()
