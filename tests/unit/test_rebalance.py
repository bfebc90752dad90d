"""The rebalance planner: replicas and preferred leaders within one per live broker, racks kept
apart, no move without need."""

from __future__ import annotations

from collections import Counter

import pytest
from dm_broker.controller.placement import assign
from dm_broker.controller.rebalance import PlanError, plan, spread
from hypothesis import given, settings
from hypothesis import strategies as st


def apply(assignment, moves):
    out = dict(assignment)
    for m in moves:
        assert out[(m.topic, m.partition)] == list(m.before)
        out[(m.topic, m.partition)] = list(m.after)
    return out


def three_broker_cluster(partitions: int = 12, rf: int = 3) -> dict:
    plan_ = assign([(0, None), (1, None), (2, None)], partitions, rf, seed=3)
    return {("t", i): list(r) for i, r in enumerate(plan_)}


def within_one(values) -> bool:
    values = list(values)
    return max(values) - min(values) <= 1


def test_adding_three_brokers_spreads_replicas_and_leaders_with_the_fewest_copies():
    before = three_broker_cluster(12, 3)
    brokers = {b: None for b in range(6)}
    moves = plan(before, brokers)
    after = apply(before, moves)
    counts = spread(after, brokers)
    assert within_one(c[0] for c in counts.values()) and within_one(c[1] for c in counts.values())
    # 36 replicas over 6 brokers: 6 each, so exactly 18 copies land on the new brokers and none elsewhere.
    assert sum(m.copies for m in moves) == 18
    assert all(len(set(r)) == 3 for r in after.values())
    assert plan(after, brokers) == []  # balanced: nothing to do


def test_drain_moves_everything_off_one_broker():
    before = three_broker_cluster(6, 2)
    brokers = {0: None, 1: None, 2: None, 3: None}
    after = apply(before, plan(before, brokers, exclude={1}))
    assert all(1 not in r for r in after.values())
    counts = spread(after, [0, 2, 3])
    assert within_one(counts[b][0] for b in (0, 2, 3))
    with pytest.raises(PlanError, match="only 2 brokers"):
        plan(three_broker_cluster(3, 3), {0: None, 1: None, 2: None}, exclude={2})


def test_racks_stay_apart():
    racks = {0: "a", 1: "b", 2: "c", 3: "a", 4: "b", 5: "c"}
    before = {("t", i): list(r) for i, r in enumerate(assign([(0, "a"), (1, "b"), (2, "c")], 9, 3, seed=1))}
    after = apply(before, plan(before, racks))
    assert all(len({racks[b] for b in r}) == 3 for r in after.values())
    assert within_one(c[0] for c in spread(after, racks).values())


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 7), st.integers(1, 3), st.integers(1, 30), st.integers(0, 3), st.integers(0, 10_000),
       st.booleans())
def test_any_cluster_ends_within_one_replica_per_broker(old, rf, partitions, added, seed, with_racks):
    rf = min(rf, old)
    racks = {b: (f"r{b % 3}" if with_racks else None) for b in range(old + added)}
    before = {("t", i): list(r) for i, r in enumerate(assign([(b, racks[b]) for b in range(old)], partitions, rf,
                                                             seed=seed))}
    moves = plan(before, racks)
    after = apply(before, moves)
    counts = spread(after, racks)
    if not with_racks or len(racks) % 3 == 0:  # racks of unequal size cannot all hold the same share
        assert within_one(c[0] for c in counts.values())
        if rf > 1 or partitions >= len(racks):  # RF 1 leaders can only move with their data
            assert within_one(c[1] for c in counts.values())
    assert all(len(set(r)) == rf for r in after.values())
    rack_spread = {k: len({racks[b] or b for b in r}) for k, r in after.items()}
    assert all(rack_spread[k] >= len({racks[b] or b for b in before[k]}) for k in before)
    # No move without need: copies land only where a broker ends with more replicas than it had.
    initial = Counter(b for r in before.values() for b in r)
    assert sum(m.copies for m in moves) == sum(max(0, counts[b][0] - initial[b]) for b in racks)


def test_each_topic_and_the_totals_are_even():
    brokers3 = [(0, None), (1, None), (2, None)]
    before = {("a", i): list(r) for i, r in enumerate(assign(brokers3, 12, 3, seed=1))}
    before |= {("b", i): list(r) for i, r in enumerate(assign(brokers3, 5, 2, seed=2))}
    before |= {("c", i): list(r) for i, r in enumerate(assign(brokers3, 7, 1, seed=3))}
    brokers = {b: None for b in range(6)}
    after = apply(before, plan(before, brokers))
    for topic in "abc":
        counts = spread({k: v for k, v in after.items() if k[0] == topic}, brokers)
        assert within_one(c[0] for c in counts.values()) and within_one(c[1] for c in counts.values()), topic
    totals = spread(after, brokers)
    assert within_one(c[0] for c in totals.values()) and within_one(c[1] for c in totals.values()), totals
