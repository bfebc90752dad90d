"""When a leader counts a follower as caught up (replica.lag.time.max.ms): Kafka's rule, on a clock the
test moves, against a real partition log."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from dm_broker.config import BrokerConfig, TopicSettings
from dm_broker.log.partition_log import PartitionLog
from dm_broker.log.records import build_batch, validate_batches
from dm_broker.replication import partition as partition_module
from dm_broker.replication.partition import Partition

MAX_LAG_S = 3.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(partition_module, "time", SimpleNamespace(monotonic=c.monotonic))
    return c


@pytest.fixture
def leader(tmp_path: Path, clock: Clock):
    plog = PartitionLog(tmp_path / "t-0", "t", 0, TopicSettings(BrokerConfig.build({}, environ={}), {}))
    plog.open()
    part = Partition("t", 0, plog, node_id=1)
    part.become_leader(leader_epoch=1, partition_epoch=1, replicas=[1, 2], isr=[1, 2])
    yield part
    plog.close()


def append(part: Partition, n: int = 1) -> None:
    for _ in range(n):
        data = bytearray(build_batch([(None, b"v", [])], timestamp_ms=1_000))
        part.log.append(data, validate_batches(data, 1 << 20), 1)


def test_a_follower_that_keeps_up_with_a_steady_stream_stays_in_the_isr(leader: Partition, clock: Clock) -> None:
    # Records arrive between every two fetches, so no fetch ever starts at the log end; each fetch has all
    # the leader had at the previous one. For 30 s: ten times the lag limit.
    append(leader)
    previous_leo = leader.log.log_end_offset
    leader.update_follower(2, previous_leo)
    for _ in range(300):
        append(leader)
        clock.now += 0.1
        leo_now = leader.log.log_end_offset
        leader.update_follower(2, previous_leo)  # what the leader had at its previous fetch, not more
        previous_leo = leo_now
        assert leader.stale_followers(MAX_LAG_S) == []


def test_a_follower_that_falls_behind_leaves_the_isr_after_the_lag_limit(leader: Partition, clock: Clock) -> None:
    append(leader, 10)
    leader.update_follower(2, 10)  # at the log end
    for _ in range(29):  # then it fetches every 0.1 s but never gets past offset 10 while records keep coming
        append(leader)
        clock.now += 0.1
        leader.update_follower(2, 10)
    assert leader.stale_followers(MAX_LAG_S) == []  # 2.9 s behind: within the limit
    clock.now += 0.2
    leader.update_follower(2, 10)
    assert leader.stale_followers(MAX_LAG_S) == [2]
    assert leader.lag_report([2]) == "2: caught up 3.1s ago, last fetch 0.0s ago at offset 10 of 39"


def test_a_follower_that_stops_fetching_leaves_the_isr(leader: Partition, clock: Clock) -> None:
    append(leader, 5)
    leader.update_follower(2, 5)
    clock.now += MAX_LAG_S + 0.1
    assert leader.stale_followers(MAX_LAG_S) == [2]
