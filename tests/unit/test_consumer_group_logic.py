"""KIP-848 pure logic: the server-side assignors, reconciliation with member epochs, the group's
phase, and the coordinator records' encodings."""

from __future__ import annotations

import itertools
import uuid

import pytest
from dm_broker.config import BrokerConfig, ConfigError
from dm_broker.groups.assignors import MemberSpec, assign, range_assign, short_name, uniform_assign
from dm_broker.groups.consumer_group import (
    ConsumerGroupPhase,
    ConsumerGroupState,
    ConsumerMember,
    MemberState,
    metadata_hash,
    reconcile,
)
from dm_broker.groups.consumer_protocol import HeartbeatRequest, InvalidHeartbeat, consumer_settings, validate
from dm_broker.groups.records import (
    CONSUMER_CURRENT_MEMBER_KEY,
    CONSUMER_GROUP_KEY,
    ConsumerCurrentValue,
    ConsumerGroupValue,
    ConsumerKey,
    ConsumerMemberValue,
    decode_consumer_group,
    decode_consumer_member,
    decode_current_member,
    decode_key,
    decode_target_member,
    encode_consumer_group,
    encode_consumer_key,
    encode_consumer_member,
    encode_current_member,
    encode_target_member,
)
from kio.schema.errors import ErrorCode

T1, T2 = str(uuid.uuid4()), str(uuid.uuid4())


def counts(assignment) -> dict[str, int]:
    return {m: sum(len(ps) for ps in a.values()) for m, a in assignment.items()}


def every_partition_once(assignment, partitions) -> None:
    seen = [(t, p) for a in assignment.values() for t, ps in a.items() for p in ps]
    assert sorted(seen) == sorted((t, p) for t, n in partitions.items() for p in range(n))


def test_range_gives_contiguous_ranges_the_first_members_one_more():
    members = {m: MemberSpec(frozenset({T1, T2})) for m in ("a", "b", "c")}
    out = range_assign(members, {T1: 7, T2: 3})
    assert out["a"][T1] == {0, 1, 2} and out["b"][T1] == {3, 4} and out["c"][T1] == {5, 6}
    # co-partitioning: partition i of both topics on the same member
    assert out["a"][T2] == {0} and out["b"][T2] == {1} and out["c"][T2] == {2}


def test_uniform_balances_heterogeneous_subscriptions():
    members = {"a": MemberSpec(frozenset({T1})), "b": MemberSpec(frozenset({T1, T2})), "c": MemberSpec(frozenset({T2}))}
    partitions = {T1: 6, T2: 6}
    out = uniform_assign(members, partitions)
    every_partition_once(out, partitions)
    assert set(counts(out).values()) == {4}
    assert T2 not in out["a"] and T1 not in out["c"]


def test_uniform_is_sticky_when_a_member_joins_and_leaves():
    partitions = {T1: 12}
    first = uniform_assign({m: MemberSpec(frozenset({T1})) for m in "ab"}, partitions)
    joined = uniform_assign({"a": MemberSpec(frozenset({T1}), first["a"]), "b": MemberSpec(frozenset({T1}), first["b"]),
                             "c": MemberSpec(frozenset({T1}))}, partitions)
    every_partition_once(joined, partitions)
    assert counts(joined) == {"a": 4, "b": 4, "c": 4}
    assert joined["a"][T1] <= first["a"][T1] and joined["b"][T1] <= first["b"][T1]  # only moves to the newcomer
    left = uniform_assign({"a": MemberSpec(frozenset({T1}), joined["a"]),
                           "c": MemberSpec(frozenset({T1}), joined["c"])}, partitions)
    every_partition_once(left, partitions)
    assert left["a"][T1] >= joined["a"][T1] and left["c"][T1] >= joined["c"][T1]


@pytest.mark.parametrize("members,partitions", list(itertools.product([1, 2, 3, 7], [1, 5, 16])))
def test_uniform_every_partition_once_and_spread_at_most_one(members, partitions):
    specs = {f"m{i}": MemberSpec(frozenset({T1})) for i in range(members)}
    out = uniform_assign(specs, {T1: partitions})
    every_partition_once(out, {T1: partitions})
    assert max(counts(out).values()) - min(counts(out).values()) <= 1


def test_assignor_names():
    assert short_name("org.apache.kafka.coordinator.group.assignor.RangeAssignor") == "range"
    assert short_name("uniform") == "uniform" and short_name("sticky") is None
    with pytest.raises(ValueError):
        assign("sticky", {}, {})


def member(epoch: int = 1, assigned=None) -> ConsumerMember:
    return ConsumerMember("m", member_epoch=epoch, assigned=assigned or {})


def test_reconcile_revokes_before_it_assigns_and_keeps_the_epoch_until_confirmed():
    m = member(1, {T1: frozenset({0, 1, 2})})
    reconcile(m, 2, {T1: frozenset({0, 3})}, owned_by_others={}, reported=None)
    assert m.state == MemberState.UNREVOKED_PARTITIONS and m.member_epoch == 1
    assert m.assigned == {T1: frozenset({0})} and m.pending_revocation == {T1: frozenset({1, 2})}
    reconcile(m, 2, {T1: frozenset({0, 3})}, {}, reported={T1: frozenset({0, 1})})  # still owns 1
    assert m.state == MemberState.UNREVOKED_PARTITIONS
    reconcile(m, 2, {T1: frozenset({0, 3})}, {}, reported={T1: frozenset({0})})
    assert m.state == MemberState.STABLE and m.member_epoch == 2 and m.previous_member_epoch == 1
    assert m.assigned == {T1: frozenset({0, 3})} and not m.pending_revocation


def test_reconcile_withholds_partitions_another_member_still_owns():
    m = member(1, {})
    reconcile(m, 2, {T1: frozenset({4, 5})}, owned_by_others={(T1, 5): "other"}, reported={})
    assert m.state == MemberState.UNRELEASED_PARTITIONS and m.member_epoch == 2
    assert m.assigned == {T1: frozenset({4})}
    reconcile(m, 2, {T1: frozenset({4, 5})}, owned_by_others={}, reported={T1: frozenset({4})})
    assert m.state == MemberState.STABLE and m.assigned == {T1: frozenset({4, 5})}


def test_assignment_epochs_let_an_older_epoch_commit_only_what_the_member_kept_since():
    """KIP-1251: a commit that crossed the heartbeat raising the member's epoch still counts for the
    partitions the member owned at that epoch and still owns; never for one it got later or gave up."""
    m = member(0, {})
    reconcile(m, 1, {T1: frozenset({0, 1})}, {}, reported={})
    assert m.assignment_epochs == {(T1, 0): 1, (T1, 1): 1}
    reconcile(m, 3, {T1: frozenset({0, 1, 2})}, {}, reported={T1: frozenset({0, 1})})
    assert m.member_epoch == 3 and m.assignment_epochs == {(T1, 0): 1, (T1, 1): 1, (T1, 2): 3}
    assert m.owned_since(1, [(T1, 0), (T1, 1)])  # a commit sent at epoch 1, answered after the bump
    assert not m.owned_since(1, [(T1, 2)])  # assigned at 3: epoch 1 never owned it
    assert not m.owned_since(0, [(T1, 0)])  # older than the assignment
    assert not m.owned_since(4, [(T1, 0)])  # newer than the member: never valid
    assert not m.owned_since(3, [(T2, 0)])  # not the member's
    # revoked partitions keep their epoch until confirmed, then are forgotten; given back, they start anew
    reconcile(m, 4, {T1: frozenset({2})}, {}, reported=None)
    assert m.state == MemberState.UNREVOKED_PARTITIONS and m.owned_since(1, [(T1, 0)])
    reconcile(m, 4, {T1: frozenset({2})}, {}, reported={T1: frozenset({2})})
    assert m.assignment_epochs == {(T1, 2): 3} and not m.owned_since(3, [(T1, 0)])
    reconcile(m, 5, {T1: frozenset({0, 2})}, {}, reported={T1: frozenset({2})})
    assert m.assignment_epochs == {(T1, 0): 5, (T1, 2): 3} and not m.owned_since(4, [(T1, 0)])


def test_assignment_epochs_missing_from_an_old_record_count_as_the_members_epoch():
    m = member(6, {T1: frozenset({0})})
    assert m.assignment_epoch(T1, 0) == 6 and m.assignment_epoch(T1, 1) is None
    assert m.owned_since(6, [(T1, 0)]) and not m.owned_since(5, [(T1, 0)])
    m.assignment_epochs = {(T1, 0): 9}
    m.cap_assignment_epochs()  # a static member taken over at an earlier epoch
    assert m.assignment_epochs == {(T1, 0): 6}


def test_group_phase():
    g = ConsumerGroupState()
    assert g.phase == ConsumerGroupPhase.EMPTY
    g.add(ConsumerMember("a", member_epoch=1))
    g.group_epoch, g.assignment_epoch = 2, 1
    assert g.phase == ConsumerGroupPhase.ASSIGNING
    g.assignment_epoch = 2
    assert g.phase == ConsumerGroupPhase.RECONCILING
    g.members["a"].member_epoch = 2
    assert g.phase == ConsumerGroupPhase.STABLE


def test_preferred_assignor_is_the_members_majority():
    g = ConsumerGroupState()
    assert g.preferred_assignor(["uniform", "range"]) == "uniform"
    for name, assignor in (("a", "range"), ("b", "range"), ("c", "uniform")):
        g.add(ConsumerMember(name, server_assignor=assignor))
    assert g.preferred_assignor(["uniform", "range"]) == "range"


def test_metadata_hash_changes_with_partitions_and_ids():
    base = metadata_hash({"t": (T1, 3)})
    assert base == metadata_hash({"t": (T1, 3)})
    assert base != metadata_hash({"t": (T1, 4)}) and base != metadata_hash({"t": (T2, 3)})


def test_records_round_trip():
    key = ConsumerKey(CONSUMER_CURRENT_MEMBER_KEY, "g", "m1")
    assert decode_key(encode_consumer_key(key)) == key
    assert decode_key(encode_consumer_key(ConsumerKey(CONSUMER_GROUP_KEY, "g"))) == ConsumerKey(CONSUMER_GROUP_KEY, "g")
    assert decode_consumer_group(encode_consumer_group(ConsumerGroupValue(7, -12345))) == ConsumerGroupValue(7, -12345)
    value = ConsumerMemberValue("i", None, "client", "/1.2.3.4", ("a", "b"), "x.*", 30000, "range")
    assert decode_consumer_member(encode_consumer_member(value)) == value
    current = ConsumerCurrentValue(3, 2, 2, {T1: frozenset({0, 2})}, {T2: frozenset({1})})
    assert decode_current_member(encode_current_member(current)) == current
    current.assignment_epochs = {(T1, 0): 1, (T1, 2): 3, (T2, 1): 2}
    assert decode_current_member(encode_current_member(current)) == current
    # a topic whose epochs are not all known is written without them (the member's epoch stands in)
    partial = ConsumerCurrentValue(3, 2, 2, {T1: frozenset({0, 2})}, {}, {(T1, 0): 1})
    assert decode_current_member(encode_current_member(partial)).assignment_epochs == {}
    assert decode_target_member(encode_target_member({T1: frozenset({5})})) == {T1: frozenset({5})}


SETTINGS = consumer_settings(BrokerConfig.build())


@pytest.mark.parametrize("changes,error", [
    ({"group_id": ""}, ErrorCode.invalid_group_id),
    ({"member_id": ""}, ErrorCode.invalid_request),
    ({"member_epoch": -3}, ErrorCode.invalid_request),
    ({"rebalance_timeout_ms": -1}, ErrorCode.invalid_request),
    ({"subscribed_names": None}, ErrorCode.invalid_request),
    ({"owned": {T1: frozenset({0})}}, ErrorCode.invalid_request),
    ({"server_assignor": "sticky"}, ErrorCode.unsupported_assignor),
    ({"subscribed_regex": "("}, ErrorCode.invalid_regular_expression),
    ({"member_epoch": -2}, ErrorCode.invalid_request),  # a static leave without an instance id
])
def test_heartbeat_validation(changes, error):
    fields = {"group_id": "g", "member_id": "m", "member_epoch": 0, "rebalance_timeout_ms": 1000,
              "subscribed_names": ("t",), "owned": {}, **changes}
    with pytest.raises(InvalidHeartbeat) as caught:
        validate(HeartbeatRequest(**fields), SETTINGS)
    assert caught.value.error == error


def test_consumer_settings_checked_together():
    with pytest.raises(ConfigError, match=r"group\.consumer\.assignors"):
        BrokerConfig.build({"group.consumer.assignors": "sticky"})
    with pytest.raises(ConfigError, match="must lie between"):
        BrokerConfig.build({"group.consumer.heartbeat.interval.ms": 100})
    with pytest.raises(ConfigError, match="needs classic"):
        BrokerConfig.build({"group.coordinator.rebalance.protocols": "consumer"})
    range_class = "org.apache.kafka.coordinator.group.assignor.RangeAssignor"
    config = BrokerConfig.build({"group.consumer.assignors": f"{range_class},uniform"})
    assert consumer_settings(config).assignors == ("range", "uniform")


def test_uniform_random_subscriptions_place_every_partition_on_a_subscriber():
    import random

    rng = random.Random(848)
    topics = [str(uuid.UUID(int=i + 1)) for i in range(5)]
    for _ in range(200):
        partitions = {t: rng.randint(1, 9) for t in topics}
        specs = {f"m{i}": MemberSpec(frozenset(rng.sample(topics, rng.randint(1, 5))))
                 for i in range(rng.randint(1, 6))}
        subscribed = {t: n for t, n in partitions.items() if any(t in s.topics for s in specs.values())}
        out = uniform_assign(specs, partitions)
        every_partition_once(out, subscribed)
        for member, assignment in out.items():
            assert set(assignment) <= specs[member].topics
        # uniform again from its own result moves nothing: the balance it reached is stable
        again = uniform_assign({m: MemberSpec(s.topics, out[m]) for m, s in specs.items()}, partitions)
        assert again == out


def test_embedded_consumer_protocol_round_trip():
    from dm_broker.binary import FormatError, Writer
    from dm_broker.groups.embedded_protocol import decode_assignment, decode_subscription, encode_assignment

    # ConsumerProtocolSubscription v1 as a cooperative client writes it: topics, no user data, owned partitions
    w = Writer().i16(1).i32(2).string("a").string("b").bytes_(None).i32(1).string("a").i32(2).i32(0).i32(3)
    sub = decode_subscription(w.done())
    assert sub.version == 1 and sub.topics == ("a", "b") and sub.owned == {"a": frozenset({0, 3})}
    assert decode_subscription(Writer().i16(0).i32(1).string("t").bytes_(b"x").done()).owned == {}
    with pytest.raises(FormatError):
        decode_subscription(b"\x00")
    data = encode_assignment(1, {"a": frozenset({2, 1}), "b": frozenset({0})})
    assert decode_assignment(data) == {"a": frozenset({1, 2}), "b": frozenset({0})}
    assert decode_assignment(b"") == {} and decode_assignment(b"\x00\x01\x00") == {}


def test_classic_member_metadata_round_trips():
    value = ConsumerMemberValue(None, None, "c", "/h", ("t",), None, 60000, None,
                                classic=(10000, (("range", b"\x00\x01"), ("cooperative-sticky", b""))))
    assert decode_consumer_member(encode_consumer_member(value)) == value


def test_online_upgrade_follows_the_migration_policy():
    from dm_broker.groups.consumer_protocol import ConsumerProtocol, ConsumerSettings
    from dm_broker.groups.group import Group, Member

    group = Group("g", protocol_type="consumer")
    group.add(Member("m", None, "c", "/h", 1000, 1000, "consumer", [("range", b"")]))
    with pytest.raises(InvalidHeartbeat) as caught:
        ConsumerProtocol(None, ConsumerSettings(migration_policy="downgrade"))._upgrade(group)  # type: ignore[arg-type]
    assert caught.value.error == ErrorCode.group_id_not_found and "migration.policy" in str(caught.value)
    group.protocol_type = "connect"
    with pytest.raises(InvalidHeartbeat, match="not consumer"):
        ConsumerProtocol(None, ConsumerSettings())._upgrade(group)  # type: ignore[arg-type]


def test_topic_view_is_computed_once_per_metadata_version():
    import re
    from types import SimpleNamespace

    from dm_broker.topic_view import TopicView

    def topic(tid: str, n: int):
        return SimpleNamespace(topic_id=tid, partitions=[None] * n)

    md = SimpleNamespace(version=1, topics={"orders": topic(T1, 3), "__consumer_offsets": topic(T2, 50)})
    compiles: list[str] = []
    view = TopicView(lambda: md, lambda r: compiles.append(r) or re.compile(r))
    first = view.topics()
    assert first == {"orders": (T1, 3), "__consumer_offsets": (T2, 50)} and view.topics() is first
    assert view.matching(".*") == {"orders"}  # internal topics only by name
    view.matching(".*")
    assert compiles == [".*"]  # matched once per version
    md.version, md.topics = 2, {**md.topics, "orders-eu": topic(str(uuid.uuid4()), 1)}
    assert view.matching("orders.*") == {"orders", "orders-eu"} and view.topics() is not first
