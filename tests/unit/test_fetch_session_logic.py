"""Fetch sessions without I/O: the leader's cache (owners, slots, eviction, expiry, what a response must
carry) and the fetcher's half (full, then only changes; resets)."""

from __future__ import annotations

from types import SimpleNamespace

from dm_broker.protocol.fetch_sessions import EVICTION_S, CachedPartition, FetchSessionCache, next_epoch
from dm_broker.replication.fetch_session_client import FetchSessionClient, PartitionFetch
from kio.schema.errors import ErrorCode

CONSUMER = ("User:ANONYMOUS", -1)
FOLLOWER = ("User:ANONYMOUS", 2)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def request(partition: int, offset: int) -> SimpleNamespace:
    return SimpleNamespace(partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20,
                           current_leader_epoch=3, log_start_offset=0, last_fetched_epoch=3)


def test_epochs_wrap_to_one():
    assert next_epoch(0) == 1 and next_epoch(41) == 42 and next_epoch(0x7FFFFFFF) == 1


def test_a_session_is_found_only_by_its_owner():
    cache = FetchSessionCache(10)
    session = cache.create(CONSUMER, uses_topic_ids=False)
    assert cache.get(session.id, CONSUMER) is session
    assert cache.get(session.id, FOLLOWER) is None
    assert cache.get(session.id, ("User:mallory", -1)) is None
    cache.remove(session.id, ("User:mallory", -1))  # not theirs to close
    assert cache.get(session.id, CONSUMER) is session
    cache.remove(session.id, CONSUMER)
    assert cache.get(session.id, CONSUMER) is None and session.closed


def test_a_full_cache_replaces_only_stale_sessions_or_a_consumer_for_a_follower():
    clock = Clock()
    cache = FetchSessionCache(2, clock)
    a = cache.create(CONSUMER, False)
    clock.now += 1
    b = cache.create(CONSUMER, False)
    assert cache.create(CONSUMER, False) is None  # both in use: a new consumer goes without
    follower = cache.create(FOLLOWER, False)  # replication first: the least recently used consumer goes
    assert follower is not None and a.closed and not b.closed
    clock.now += EVICTION_S + 1
    cache.get(follower.id, FOLLOWER)
    c = cache.create(CONSUMER, False)  # b went unused for the eviction time
    assert c is not None and b.closed and len(cache) == 2


def test_unused_sessions_expire_and_stop_watching():
    clock = Clock()
    cache = FetchSessionCache(10, clock)
    session = cache.create(CONSUMER, False)
    watched = []
    part = SimpleNamespace(watch=lambda s, k: watched.append(k), unwatch=lambda s: watched.remove(("t", 0)))
    key = session.upsert("t", bytes(16), request(0, 5))
    session.watch(key, part)
    assert watched == [("t", 0)]
    clock.now += EVICTION_S + 11
    assert cache.get(12345, CONSUMER) is None  # any lookup runs the expiry
    assert session.closed and watched == [] and len(cache) == 0


def test_marks_collect_until_taken():
    cache = FetchSessionCache(10)
    session = cache.create(CONSUMER, False)
    for p in range(3):
        session.upsert("t", bytes(16), request(p, 0))
    session.mark(("t", 1))
    session.mark(("t", 2))
    assert session.take_dirty() == {("t", 1), ("t", 2)} and session.take_dirty() == set()
    session.mark(("t", 1))
    session.forget(("t", 1))
    assert session.take_dirty() == set() and ("t", 1) not in session.partitions


def test_a_partition_is_answered_when_something_it_says_changed():
    cached = CachedPartition(0, 0, 1 << 20)
    assert cached.must_respond(0, 0, 10, 10, 0)  # never sent
    assert not cached.must_respond(0, 0, 10, 10, 0)
    assert cached.must_respond(0, 0, 11, 10, 0)  # high watermark
    assert cached.must_respond(0, 0, 11, 11, 0)  # last stable offset
    assert cached.must_respond(0, 0, 11, 11, 4)  # log start
    assert cached.must_respond(0, 100, 11, 11, 4)  # records
    assert cached.must_respond(ErrorCode.not_leader_or_follower.value, 0, 11, 11, 4)
    assert not cached.must_respond(0, 0, 11, 11, 4)


def fetch(offset: int, max_bytes: int = 1 << 20) -> PartitionFetch:
    return PartitionFetch(offset, 3, 3, 0, max_bytes)


def test_the_fetcher_sends_everything_once_then_only_changes():
    client = FetchSessionClient()
    wanted = {("t", 0): fetch(5), ("t", 1): fetch(7)}
    first = client.plan(wanted)
    assert (first.session_id, first.epoch, first.partitions, first.forgotten) == (0, 0, wanted, [])
    assert client.answered(0, 99)
    same = client.plan(dict(wanted))
    assert (same.session_id, same.epoch, same.partitions, same.forgotten) == (99, 1, {}, [])
    assert client.answered(0, 99)
    moved = client.plan({("t", 0): fetch(9)})
    assert (moved.epoch, moved.partitions, moved.forgotten) == (2, {("t", 0): fetch(9)}, [("t", 1)])
    assert client.answered(0, 99)
    assert client.known == {("t", 0): fetch(9)}


def test_the_fetcher_starts_over_after_a_session_error_or_none_given():
    client = FetchSessionClient()
    client.plan({("t", 0): fetch(5)})
    client.answered(0, 99)
    client.plan({("t", 0): fetch(5)})
    assert not client.answered(ErrorCode.invalid_fetch_session_epoch.value, 0)  # fetch again, in full
    again = client.plan({("t", 0): fetch(5)})
    assert (again.session_id, again.epoch, list(again.partitions)) == (0, 0, [("t", 0)])
    assert client.answered(0, 0)  # the leader keeps no session: full fetches go on
    assert client.plan({("t", 0): fetch(5)}).epoch == 0
    disabled = FetchSessionClient(enabled=False).plan({("t", 0): fetch(5)})
    assert (disabled.session_id, disabled.epoch) == (0, -1)


def test_the_fetcher_may_name_only_what_it_touched():
    client = FetchSessionClient()
    wanted = {("t", p): fetch(p) for p in range(5)}
    client.plan(wanted)
    client.answered(0, 99)
    wanted[("t", 1)] = fetch(50)
    del wanted[("t", 3)]
    plan = client.plan(wanted, touched={("t", 1), ("t", 3), ("t", 4)})
    assert (plan.partitions, plan.forgotten) == ({("t", 1): fetch(50)}, [("t", 3)])
    assert client.answered(0, 99)
    assert client.known == wanted


def test_a_request_names_at_most_limit_partitions_and_the_rest_follow():
    """Thousands of new partitions reach the leader's session a limit at a time: the opening request
    names the first, each next one the backlog's next, also when the caller names only what it touched."""
    client = FetchSessionClient(limit=2)
    wanted = {("t", p): fetch(p) for p in range(5)}
    first = client.plan(wanted)
    assert (first.epoch, list(first.partitions)) == (0, [("t", 0), ("t", 1)])
    assert client.backlog == {("t", 2), ("t", 3), ("t", 4)}
    assert client.answered(0, 99)
    assert client.known == {("t", 0): fetch(0), ("t", 1): fetch(1)}  # only what the leader was told
    second = client.plan(wanted, touched=set())
    assert len(second.partitions) == 2 and set(second.partitions) <= {("t", 2), ("t", 3), ("t", 4)}
    assert client.answered(0, 99)
    third = client.plan(wanted, touched=set())
    assert set(third.partitions) == {("t", 2), ("t", 3), ("t", 4)} - set(second.partitions)
    assert not client.backlog
    assert client.answered(0, 99)
    assert client.known == wanted
    assert client.plan(wanted, touched=set()).partitions == {}


def test_a_session_error_drops_the_backlog_and_a_sessionless_leader_gets_everything():
    client = FetchSessionClient(limit=2)
    wanted = {("t", p): fetch(p) for p in range(5)}
    client.plan(wanted)
    assert not client.answered(ErrorCode.fetch_session_id_not_found.value, 0)
    assert not client.backlog
    opening = client.plan(wanted)
    assert len(opening.partitions) == 2
    assert client.answered(0, 0)  # no session: a bounded request would leave three partitions unread
    assert client.plan(wanted).partitions == wanted
    assert client.answered(0, 7)  # a session after all: bounded again from here
    assert client.known == wanted and not client.backlog
    wanted = {k: fetch(v.fetch_offset + 1) for k, v in wanted.items()}
    assert len(client.plan(wanted).partitions) == 2 and len(client.backlog) == 3


def leader_watched_by(tmp_path, session) -> tuple:
    from dm_broker.config import BrokerConfig, TopicSettings
    from dm_broker.log.partition_log import PartitionLog
    from dm_broker.replication.partition import Partition

    plog = PartitionLog(tmp_path / "t-0", "t", 0, TopicSettings(BrokerConfig.build({}, environ={}), {}))
    plog.open()
    part = Partition("t", 0, plog, node_id=1)
    part.become_leader(leader_epoch=1, partition_epoch=1, replicas=[1, 2, 3], isr=[1, 2, 3])
    key = session.upsert("t", bytes(16), request(0, 0))
    session.watch(key, part)
    for replica in (2, 3):
        part.update_follower(replica, 0, 0, session)
    session.take_dirty()
    return part, key


def test_a_follower_dropped_from_the_isr_is_read_again_in_its_session(tmp_path):
    # An idle, caught-up follower names nothing in its incremental fetches: when the ISR loses it (the
    # controller fenced its broker, or a shrink committed after it caught up), the leader must read the
    # partition for the session again, or the follower never asks to rejoin.
    session = FetchSessionCache(10).create(FOLLOWER, False)
    part, key = leader_watched_by(tmp_path, session)
    part.update_isr([1, 2, 3], partition_epoch=2)
    assert session.take_dirty() == set()  # nobody outside the ISR: nothing to read again
    part.update_isr([1, 3], partition_epoch=3)
    assert session.take_dirty() == {key}
    part.set_replicas([1, 2, 3, 4])  # a reassignment's new replica starts outside the ISR
    assert session.take_dirty() == {key}
    assert part.update_follower(2, 0, 0, session)  # read again: caught up, so it asks to join
    part.log.close()
