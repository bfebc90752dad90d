"""When concurrent REST produce requests share a gathering (ADR 0056), on a real event loop: the write is the
one the REST Proxy makes, replaced here by one that records what it was given and answers as a leader would
(each partition's base offset), since what is decided is which requests go together."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from dm_broker.http.rest.gathering import Gatherer, Gathering, Outcome, placed
from dm_broker.http.rest.producer import RestProducer, batch_bytes_bound
from dm_broker.security.listeners import Listener
from dm_broker.security.principal import Principal
from dm_broker.security.session import Session
from hypothesis import given, settings
from hypothesis import strategies as st


def session(user: str = "alice") -> Session:
    listener = Listener(name="HTTP", host="127.0.0.1", port=0, security_protocol="PLAINTEXT",
                        advertised_host="127.0.0.1", advertised_port=0)
    return Session(listener, "127.0.0.1", principal=Principal("User", user))


def records(n: int) -> list:
    return [SimpleNamespace(key=None, value=b"v", partition=None, headers=(), timestamp=None) for _ in range(n)]


class Leader:
    """Answers every partition of a gathering with the offsets a log would give it."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.ends: dict[int, int] = {}
        self.written: list[Gathering] = []
        self.fail = fail

    async def write(self, gathering: Gathering) -> dict[int, Outcome]:
        self.written.append(gathering)
        await asyncio.sleep(0)
        if self.fail is not None:
            raise self.fail
        outcomes: dict[int, Outcome] = {}
        for partition in gathering.chunks:
            count = gathering.count(partition)
            outcomes[partition] = (self.ends.get(partition, 0), None, None)
            self.ends[partition] = self.ends.get(partition, 0) + count
        return outcomes


async def one_request(gatherer: Gatherer, key: tuple, parts: dict[int, int], size: int = 100,
                      limit: int = 1 << 20, before_join: asyncio.Event | None = None) -> dict[int, Outcome]:
    with gatherer.request() as arrival:
        if before_join is not None:
            await before_join.wait()  # still arriving (its body being read)
        return await gatherer.join(key, session(key[2].name), {p: records(n) for p, n in parts.items()}, size, limit,
                                   1e12, arrival)


async def settle() -> None:
    """Lets the requests started run until they wait (a few loop iterations, far less than GATHERING_WAIT_S)."""
    for _ in range(5):
        await asyncio.sleep(0)


def key(topic: str = "t", user: str = "alice") -> tuple:
    return (topic, "HTTP", Principal("User", user), "127.0.0.1", None)


async def joined_and_arriving(leader: Leader, first_parts: dict[int, int] | None = None,
                              second_parts: dict[int, int] | None = None
                              ) -> tuple[asyncio.Future, asyncio.Future, asyncio.Event]:
    """Two requests of one user to one topic: the first has joined its gathering and waits, the second is
    still arriving until the event is set."""
    gatherer = Gatherer(leader.write)
    arriving = asyncio.Event()
    first = asyncio.ensure_future(one_request(gatherer, key(), first_parts or {0: 1}))
    second = asyncio.ensure_future(one_request(gatherer, key(), second_parts or {0: 1}, before_join=arriving))
    await settle()
    return first, second, arriving


async def test_requests_arriving_together_share_one_write_and_get_their_own_offsets() -> None:
    leader = Leader()
    first, second, arriving = await joined_and_arriving(leader, {0: 3, 1: 2}, {0: 4})
    assert leader.written == []  # the first waits for the second
    arriving.set()
    assert await first == {0: (0, None, None), 1: (0, None, None)}
    assert await second == {0: (3, None, None)}  # after the first request's three records
    assert len(leader.written) == 1 and leader.written[0].requests == 2


async def test_a_request_alone_goes_without_waiting_for_others() -> None:
    leader = Leader()
    gatherer = Gatherer(leader.write)
    assert await one_request(gatherer, key(), {0: 2}) == {0: (0, None, None)}
    assert await one_request(gatherer, key(), {0: 2}) == {0: (2, None, None)}
    assert [g.requests for g in leader.written] == [1, 1]


async def test_other_users_and_topics_are_written_apart() -> None:
    leader = Leader()
    gatherer = Gatherer(leader.write)
    await asyncio.gather(*(one_request(gatherer, key(topic, user), {0: 1})
                           for topic, user in (("t", "alice"), ("t", "bob"), ("u", "alice"))))
    assert sorted((g.topic, g.session.principal.name) for g in leader.written) == [
        ("t", "alice"), ("t", "bob"), ("u", "alice")]


async def test_a_full_gathering_goes_and_the_next_request_starts_another() -> None:
    leader = Leader()
    gatherer = Gatherer(leader.write)
    answers = await asyncio.gather(*(one_request(gatherer, key(), {0: 1}, size=600, limit=1000) for _ in range(3)))
    assert [g.requests for g in leader.written] == [1, 1, 1]
    assert sorted(a[0][0] for a in answers) == [0, 1, 2]


async def test_a_failed_write_fails_every_request_in_it() -> None:
    leader = Leader(fail=ConnectionError("leader gone"))
    first, second, arriving = await joined_and_arriving(leader)
    arriving.set()
    for request in (first, second):
        with pytest.raises(ConnectionError, match="leader gone"):
            await request
    assert len(leader.written) == 1


async def test_a_request_whose_client_left_does_not_cancel_the_others_write() -> None:
    leader = Leader()
    first, second, arriving = await joined_and_arriving(leader)
    arriving.set()
    await asyncio.sleep(0)
    first.cancel()
    assert await second == {0: (1, None, None)}
    assert leader.written[0].requests == 2


async def test_a_request_still_arriving_holds_the_others_no_longer_than_the_wait() -> None:
    leader = Leader()
    gatherer = Gatherer(leader.write)
    trickling = asyncio.Event()
    first = asyncio.ensure_future(one_request(gatherer, key(), {0: 1}))
    second = asyncio.ensure_future(one_request(gatherer, key(), {0: 1}, before_join=trickling))
    assert await asyncio.wait_for(first, 10) == {0: (0, None, None)}  # sent after GATHERING_WAIT_S at the latest
    assert not second.done()
    trickling.set()
    assert await second == {0: (1, None, None)}
    assert [g.requests for g in leader.written] == [1, 1]


def test_placed_adds_where_a_request_starts() -> None:
    outcomes: dict[int, Outcome] = {0: (10, None, None), 1: (-1, 1, "NOT_ENOUGH_REPLICAS: ...")}
    assert placed(outcomes, {0: 4, 1: 2}) == {0: (14, None, None), 1: (-1, 1, "NOT_ENOUGH_REPLICAS: ...")}


RECORD = st.builds(SimpleNamespace, key=st.one_of(st.none(), st.binary(max_size=300)),
                   value=st.one_of(st.none(), st.binary(max_size=3000)), partition=st.none(),
                   headers=st.lists(st.builds(SimpleNamespace, key=st.text(max_size=8),
                                              value=st.one_of(st.none(), st.binary(max_size=40))), max_size=3),
                   timestamp=st.one_of(st.none(), st.integers(0, 2**62)))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(RECORD, min_size=1, max_size=20), min_size=1, max_size=4), st.integers(0, 2**41))
def test_a_gathered_batch_is_never_larger_than_its_requests_bounds(requests: list[list], now_ms: int) -> None:
    """batch_bytes_bound, summed over a gathering's requests, bounds the batch built of them: a gathering
    kept under max.message.bytes by the bounds never builds a batch past it."""
    batch = RestProducer._batch([(records, now_ms + i) for i, records in enumerate(requests)])
    assert len(batch) <= sum(batch_bytes_bound(records) for records in requests)
