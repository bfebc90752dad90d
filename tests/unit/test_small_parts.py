from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from dm_broker.config import BrokerConfig, ConfigError, TopicSettings, validate_topic_configs
from dm_broker.log.leader_epochs import LeaderEpochCache
from dm_broker.log.producer_state import InvalidProducerEpochError, OutOfOrderSequenceError, ProducerStateManager
from dm_broker.log.records import build_batch, parse_header
from dm_broker.partitioners import Partitioner, murmur2, murmur2_partition, murmur3_partition
from hypothesis import given, settings
from hypothesis import strategies as st


def test_murmur2_matches_kafka():
    # vectors from Kafka's UtilsTest.testMurmur2
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107
    assert 0 <= murmur2_partition(b"21", 7) < 7


def test_murmur3_keyed_partitioning_is_stable_and_spread():
    counts = Counter(murmur3_partition(b"key-%d" % i, 6) for i in range(6000))
    assert set(counts) == set(range(6))
    assert min(counts.values()) > 800
    p = Partitioner("murmur3", "round_robin", 6)
    assert p.choose(b"user-1") == p.choose(b"user-1") == murmur3_partition(b"user-1", 6)


def test_round_robin_and_least_loaded_for_keyless_records():
    rr = Partitioner("murmur3", "round_robin", 3)
    assert [rr.choose(None) for _ in range(6)] == [0, 1, 2, 0, 1, 2]
    ll = Partitioner("murmur3", "least_loaded", 3, sizes=[10, 0, 5])
    picks = [ll.choose(None) for _ in range(10)]
    assert picks[:5] == [1, 1, 1, 1, 1]
    assert ll.loads == [10, 8, 7]  # the emptiest partition always gets the next record
    with pytest.raises(ValueError):
        Partitioner("nope", "round_robin", 3)


@settings(max_examples=300, deadline=None)
@given(partitions=st.integers(1, 9), keyed=st.sampled_from(["murmur3", "murmur2", "least_loaded"]),
       keyless=st.sampled_from(["round_robin", "least_loaded"]),
       runs=st.lists(st.lists(st.one_of(st.none(), st.binary(max_size=4)), max_size=30), max_size=4))
def test_choosing_a_run_at_once_is_choosing_each_record_in_turn(partitions: int, keyed: str, keyless: str,
                                                               runs: list[list[bytes | None]]) -> None:
    """choose_all (the REST Proxy's bulk path) picks the same partitions and counts the same loads."""
    at_once, one_by_one = Partitioner(keyed, keyless, partitions), Partitioner(keyed, keyless, partitions)
    for keys in [*runs, [None] * 25]:
        assert at_once.choose_all(keys) == [one_by_one.choose(k) for k in keys]
        assert at_once.loads == one_by_one.loads


def test_config_layers(tmp_path: Path):
    props = tmp_path / "broker.properties"
    props.write_text("# comment\nlog.segment.bytes=2048\nnum.partitions = 4\n")
    cfg = BrokerConfig.build({"num.partitions": "6"}, props, environ={"DM_LOG_RETENTION_MS": "1000"})
    assert cfg["log.segment.bytes"] == 2048
    assert cfg["num.partitions"] == 6  # command line beats file
    assert cfg["log.retention.ms"] == 1000
    with pytest.raises(ConfigError, match="unknown broker property"):
        BrokerConfig.build({"no.such": "1"}, environ={})
    with pytest.raises(ConfigError, match=">= 1"):
        BrokerConfig.build({"num.partitions": "0"}, environ={})
    with pytest.raises(ConfigError, match="integer"):
        BrokerConfig.build({"log.segment.bytes": "big"}, environ={})


def test_topic_settings_fall_back_to_broker():
    cfg = BrokerConfig.build({"log.retention.ms": "5000"}, environ={})
    topic = TopicSettings(cfg, {"segment.bytes": "4096"})
    assert topic["retention.ms"] == 5000 and topic["segment.bytes"] == 4096
    assert validate_topic_configs({"cleanup.policy": "compact"}) == {"cleanup.policy": "compact"}
    with pytest.raises(ConfigError):
        validate_topic_configs({"cleanup.policy": "shred"})
    with pytest.raises(ConfigError):
        validate_topic_configs({"retention.ms": None})


def test_leader_epoch_cache(tmp_path: Path):
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    cache.assign(0, 0)
    cache.assign(2, 100)
    cache.assign(5, 250)
    assert cache.end_offset_for(0, 300) == (0, 100)
    assert cache.end_offset_for(1, 300) == (0, 100)
    assert cache.end_offset_for(2, 300) == (2, 250)
    assert cache.end_offset_for(9, 300) == (5, 300)
    assert LeaderEpochCache(tmp_path / "leader-epoch-checkpoint").entries == [(0, 0), (2, 100), (5, 250)]
    cache.truncate_from_end(200)
    assert cache.entries == [(0, 0), (2, 100)]
    cache.truncate_from_start(150)
    assert cache.entries == [(2, 150)]


def header(pid: int, epoch: int, seq: int, count: int = 1):
    return parse_header(build_batch([(None, b"x", [])] * count, timestamp_ms=1, producer_id=pid,
                                    producer_epoch=epoch, base_sequence=seq))


def test_producer_state_dedup_and_ordering(tmp_path: Path):
    state = ProducerStateManager(tmp_path)
    assert state.check(header(1, 0, 0, 2)) is None
    state.update(header(1, 0, 0, 2), 0)
    assert state.check(header(1, 0, 0, 2)).first_offset == 0  # duplicate
    with pytest.raises(OutOfOrderSequenceError):
        state.check(header(1, 0, 5))
    state.update(header(1, 0, 2), 2)
    state.update(header(1, 1, 0), 3)  # epoch bump (KIP-360) restarts at sequence 0
    with pytest.raises(InvalidProducerEpochError):
        state.check(header(1, 0, 3))
    with pytest.raises(OutOfOrderSequenceError):
        state.check(header(1, 2, 4))  # a new epoch starts at 0
    state.save(10)
    loaded = ProducerStateManager(tmp_path)
    assert loaded.load() == 10
    assert loaded.producers[1].epoch == 1


def test_configuration_reference_is_current():
    from dm_broker.tools.config_docs import render

    doc = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    assert doc.read_text() == render(), "run: .venv/bin/python -m dm_broker.tools.config_docs > docs/configuration.md"


def test_idle_producers_expire(tmp_path: Path):
    state = ProducerStateManager(tmp_path)
    state.update(header(1, 0, 0), 0)  # batch timestamp 1 ms
    state.update(header(2, 0, 0), 1)
    state.producers[2].last_timestamp = 10_000
    state.expire(now_ms=10_500, expiration_ms=1_000)
    assert set(state.producers) == {2}  # producer 1 was idle for longer than the expiration


def test_relative_links_in_the_docs_reach_a_file_and_heading():
    import re

    repo = Path(__file__).resolve().parents[2]

    def anchors(doc: Path) -> set[str]:
        # GitHub's anchors: lower case, punctuation dropped, spaces to hyphens
        return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                for h in re.findall(r"^#+ (.+)$", doc.read_text(), flags=re.M)}

    broken = []
    for doc in [repo / "README.md", *sorted((repo / "docs").rglob("*.md"))]:
        text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            where = (doc.parent / path).resolve() if path else doc
            if not where.exists():
                broken.append(f"{doc.relative_to(repo)}: {target}")
            elif anchor and where.suffix == ".md" and anchor not in anchors(where):
                broken.append(f"{doc.relative_to(repo)}: {target} (no such heading)")
    assert not broken, broken


def test_a_followers_new_epoch_is_written_at_once_and_fsynced_by_the_next_flush(tmp_path: Path):
    # The follower path records epochs without an fsync on the event loop (at 10,000 partitions that was
    # half of a broker's time while a load started); the flush that makes the records durable syncs it.
    from dm_broker.config import BrokerConfig, TopicSettings
    from dm_broker.log.partition_log import PartitionLog
    from dm_broker.log.records import build_batch, iter_batches

    leader = PartitionLog(tmp_path / "leader" / "t-0", "t", 0, TopicSettings(BrokerConfig.build({}, environ={}), {}))
    follower = PartitionLog(tmp_path / "follower" / "t-0", "t", 0, leader.settings)
    leader.open()
    follower.open()
    try:
        for epoch in (3, 7):
            data = bytearray(build_batch([(b"k", b"v", [])], timestamp_ms=0))
            leader.append(data, [h for _, h in iter_batches(data)], epoch)
        copied = b"".join(bytes(s.read()) for s in leader.read(0, 1 << 20, leader.log_end_offset, True).slices)
        follower.append_as_follower(copied)
        assert follower.leader_epochs.entries == [(3, 0), (7, 1)] and follower.leader_epochs.unsynced
        assert LeaderEpochCache(follower.leader_epochs.path).entries == [(3, 0), (7, 1)]  # on disk already
        follower.flush_sync()
        assert not follower.leader_epochs.unsynced
        follower.leader_epochs.truncate_from_end(1)  # a truncation is written durably, as before
        assert LeaderEpochCache(follower.leader_epochs.path).entries == [(3, 0)]
        assert not follower.leader_epochs.unsynced
    finally:
        leader.close()
        follower.close()
