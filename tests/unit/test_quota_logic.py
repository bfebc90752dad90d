"""Client quotas without I/O: which entity's quota a client gets (Kafka's order) and who shares a rate,
DescribeClientQuotas' filters, AlterClientQuotas' refusals, the token bucket's throttle, and the time a
handler spends on the loop."""

from __future__ import annotations

import asyncio

import pytest
from dm_broker.quotas.entities import (
    CLIENT_ID,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    applicable,
    entity_key,
    entity_refusal,
    matches,
    value_refusal,
)
from dm_broker.quotas.handler_time import TimedCoroutine
from dm_broker.quotas.manager import QuotaManager
from dm_broker.quotas.rate import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def quotas(*entries: tuple[dict[str, str | None], float]) -> dict:
    return {entity_key(entity): {PRODUCER_BYTE_RATE: value} for entity, value in entries}


KAFKA_ORDER = [
    ({USER: "u", CLIENT_ID: "c"}, 1), ({USER: "u", CLIENT_ID: None}, 2), ({USER: "u"}, 3),
    ({USER: None, CLIENT_ID: "c"}, 4), ({USER: None, CLIENT_ID: None}, 5), ({USER: None}, 6),
    ({CLIENT_ID: "c"}, 7), ({CLIENT_ID: None}, 8),
]


def test_the_most_specific_entity_wins_in_kafkas_order():
    for i in range(len(KAFKA_ORDER)):
        found = applicable(quotas(*KAFKA_ORDER[i:]), "u", "c", PRODUCER_BYTE_RATE)
        assert found is not None and found[0] == KAFKA_ORDER[i][1]
    assert applicable({}, "u", "c", PRODUCER_BYTE_RATE) is None
    assert applicable(quotas(({USER: "other"}, 9)), "u", "c", PRODUCER_BYTE_RATE) is None


def test_who_shares_a_rate():
    # A user's quota holds all its client ids together; a <default> part is per user / client id.
    assert applicable(quotas(({USER: "u"}, 1)), "u", "c", PRODUCER_BYTE_RATE)[1] == ("u", "")
    assert applicable(quotas(({USER: None}, 1)), "u", "c", PRODUCER_BYTE_RATE)[1] == ("u", "")
    assert applicable(quotas(({CLIENT_ID: None}, 1)), "u", "c", PRODUCER_BYTE_RATE)[1] == ("", "c")
    assert applicable(quotas(({USER: None, CLIENT_ID: None}, 1)), "u", "c", PRODUCER_BYTE_RATE)[1] == ("u", "c")


def test_describe_filters():
    both = entity_key({USER: "u", CLIENT_ID: None})
    assert matches(both, [(USER, 0, "u")], strict=False)
    assert not matches(both, [(USER, 0, "u")], strict=True)
    assert matches(both, [(USER, 0, "u"), (CLIENT_ID, 1, None)], strict=True)
    assert matches(both, [(CLIENT_ID, 2, None)], strict=False)
    assert not matches(both, [(USER, 1, None)], strict=False)
    assert matches(both, [], strict=False) and not matches(both, [], strict=True)


def test_refusals():
    assert entity_refusal([]) and entity_refusal([(USER, "a"), (USER, "b")])
    assert "not supported" in entity_refusal([("ip", "1.2.3.4")])
    assert entity_refusal([("group", "g")])
    assert entity_refusal([(USER, "a"), (CLIENT_ID, None)]) is None
    assert value_refusal("fast", 1) and value_refusal(PRODUCER_BYTE_RATE, 0) and value_refusal(PRODUCER_BYTE_RATE, 1.5)
    assert value_refusal("request_percentage", 12.5) is None


def test_a_bucket_holds_a_window_then_throttles_exactly_the_debt():
    clock = Clock()
    bucket = TokenBucket(window_s=2, clock=clock)
    assert bucket.record(2000, bound=1000) == 0  # a full bucket: two seconds of quota
    assert bucket.record(500, bound=1000) == pytest.approx(0.5)  # 500 bytes of debt at 1000/s
    clock.now += 0.5
    assert bucket.throttle_s(1000) == pytest.approx(0)
    clock.now += 10
    assert bucket.full(1000)  # refilled to the window, not beyond
    assert bucket.record(2500, bound=1000) == pytest.approx(0.5)
    bucket.unrecord(500)
    assert bucket.throttle_s(1000) == 0


def test_a_client_sending_without_pause_is_held_at_its_bound():
    clock = Clock()
    manager = QuotaManager(window_s=2, on_throttle=lambda *_: None, clock=clock)
    manager.update(quotas(({CLIENT_ID: "greedy"}, 1000)))
    sent = 0
    while clock.now < 160:  # a minute of 100-byte requests, each as soon as the throttle allows
        clock.now += manager.record(PRODUCER_BYTE_RATE, "u", "greedy", 100) or 0.001
        sent += 100
    assert sent / 60 == pytest.approx(1000, rel=0.05)
    assert manager.record(PRODUCER_BYTE_RATE, "u", "polite", 10**9) == 0  # another client id: unlimited


def test_a_request_quota_throttles_for_at_most_a_window_sample_as_kafka_does():
    """One slow request (a loaded machine leaves the handler unscheduled) must not mute a client at 0.1 % of
    a thread for tens of seconds: Kafka bounds the throttle by quota.window.size.seconds. Byte rates are
    not bounded so."""
    clock = Clock()
    manager = QuotaManager(window_s=11, on_throttle=lambda *_: None, clock=clock, request_throttle_max_s=1.0)
    manager.update({entity_key({CLIENT_ID: "chatty"}): {REQUEST_PERCENTAGE: 0.1, PRODUCER_BYTE_RATE: 1000}})
    assert manager.record(REQUEST_PERCENTAGE, "u", "chatty", 4.0) == 1.0  # 40 ms of a thread: 29 s unbounded
    clock.now += 1.0
    assert manager.record(REQUEST_PERCENTAGE, "u", "chatty", 0.1) == 1.0  # the debt is kept, so still throttled
    assert manager.record(PRODUCER_BYTE_RATE, "u", "chatty", 41_000) == pytest.approx(30)


async def test_handler_time_counts_work_not_waiting():
    async def handler() -> str:
        await asyncio.sleep(0.2)
        sum(range(200_000))
        return "done"

    timed = TimedCoroutine(handler())
    assert await timed == "done"
    assert 0 < timed.seconds < 0.2  # counting the sleep would give at least 0.2, whatever the machine's load

    async def failing() -> None:
        await asyncio.sleep(0)
        raise ValueError("boom")

    with pytest.raises(ValueError):
        await TimedCoroutine(failing())
    task = asyncio.ensure_future(TimedCoroutine(asyncio.sleep(10)))  # cancellation reaches the handler
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
