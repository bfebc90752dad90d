"""Concurrent REST produce requests share batches (ADR 0056): the records of requests from the same user to
the same topic that arrive together are written as one batch per partition, in one Produce request per
leader, as the one KafkaProducer of Confluent's REST Proxy batches its HTTP requests.

A busy broker appended a small batch per partition per request (a hundred keyless records over six
partitions: six batches of about seventeen records), and the per-batch and per-request work (the Produce
request, its handler, checks, the append, the ISR wait) was about half of its time per request.

When a request's records have joined a gathering and no other produce request is in progress, the gathering
goes at once (a client sending one request at a time waits for nothing). While others are in progress (their
answers about to go out, their clients about to send the next ones), it waits until no produce request has
been arriving (being read or parsed) for GATHERING_QUIET_S; it goes early when full (the topic's
max.message.bytes) and at the latest GATHERING_WAIT_S after it began."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field

from ...security.session import Session
from .bodies import ProduceRecord

Outcome = tuple[int, int | None, str | None]  # base offset, per-record error code, message
# Who the records are written as: the topic, and everything an ACL or a quota can tell apart.
GatheringKey = tuple[str, str, object, str, str | None]
# The longest a gathering waits for requests still arriving: what a client trickling its body can delay
# the others by (Kafka's producers linger 5 ms by default).
GATHERING_WAIT_S = 0.005
# How long no produce request must have been arriving before the gatherings go: long enough for the loop to
# read a request whose bytes are already there and start its handler.
GATHERING_QUIET_S = 0.002


def gathering_key(topic: str, session: Session) -> GatheringKey:
    return topic, session.listener.name, session.principal, session.host, session.client_subject


@dataclass
class Gathering:
    """The records of one user's requests to one topic that go in the same Produce requests."""

    key: GatheringKey
    session: Session
    deadline: float  # monotonic: the earliest of its requests'
    size: int = 0  # the most bytes its records take in a batch of one partition (a bound)
    requests: int = 0
    # partition -> (records, the arrival time in ms of the request they came in), in arrival order
    chunks: dict[int, list[tuple[Sequence[ProduceRecord], int]]] = field(default_factory=dict)
    sent: bool = False  # its Produce requests are on their way: it takes no more records
    done: asyncio.Future[dict[int, Outcome]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())

    @property
    def topic(self) -> str:
        return self.key[0]

    def count(self, partition: int) -> int:
        """The records gathered for `partition` so far."""
        return sum(len(records) for records, _ in self.chunks.get(partition, ()))

    def takes(self, size: int, limit: int) -> bool:
        """Whether a request whose records take at most `size` bytes in a batch still fits every batch under
        `limit` bytes (the topic's max.message.bytes): a request that does not starts a gathering of its own."""
        return not self.sent and self.size + size <= limit

    def add(self, parts: dict[int, Sequence[ProduceRecord]], now_ms: int, size: int, deadline: float) -> dict[int, int]:
        """Adds one request's records (partition -> its records there, in order); returns where each
        partition's records start in the gathered batch, which the base offset of the batch is added to."""
        starts = {}
        for partition, records in parts.items():
            starts[partition] = self.count(partition)
            self.chunks.setdefault(partition, []).append((records, now_ms))
        self.size += size
        self.requests += 1
        self.deadline = min(self.deadline, deadline)
        return starts


def placed(outcomes: dict[int, Outcome], starts: dict[int, int]) -> dict[int, Outcome]:
    """One request's share of a gathering's outcomes: the base offset of its own records in each partition."""
    return {partition: (outcomes[partition][0] + start, None, None) if outcomes[partition][1] is None
            else outcomes[partition] for partition, start in starts.items()}


class Arrival:
    """One produce request's arrival: `end` (once, whichever of its ends comes first) calls `on_end`."""

    def __init__(self, on_end: Callable[[], None]) -> None:
        self._on_end: Callable[[], None] | None = on_end

    def end(self) -> None:
        if self._on_end is not None:
            on_end, self._on_end = self._on_end, None
            on_end()


Write = Callable[[Gathering], Awaitable[dict[int, Outcome]]]


class Gatherer:
    """The gatherings not sent yet, and when they go. `write` sends one gathering and answers each of its
    partitions' outcome."""

    def __init__(self, write: Write) -> None:
        self._write = write
        self._gatherings: dict[GatheringKey, Gathering] = {}
        self._active = 0  # produce requests in progress (from their first byte until answered)
        self._arriving = 0  # of which: not yet in a gathering
        self._quiet_since = 0.0  # monotonic: when the last arriving request stopped arriving
        self._quiet_check = False  # _send_if_quiet is scheduled
        self._sending: set[asyncio.Task[None]] = set()

    @contextlib.contextmanager
    def request(self) -> Iterator[Arrival]:
        """Around a whole produce request; its arrival ends when its records join a gathering (`join`), or
        when it fails before."""
        self._active += 1
        self._arriving += 1
        arrival = Arrival(self._arrived)
        try:
            yield arrival
        finally:
            arrival.end()
            self._active -= 1

    async def join(self, key: GatheringKey, session: Session, parts: dict[int, Sequence[ProduceRecord]], size: int,
                   limit: int, deadline: float, arrival: Arrival) -> dict[int, Outcome]:
        """This request's outcome in each of its partitions, once its gathering has been written."""
        gathering = self._gatherings.get(key)
        if gathering is None or not gathering.takes(size, limit):
            if gathering is not None:
                self._send(gathering)  # full: it goes now
            gathering = self._gatherings[key] = Gathering(key, session, deadline)
            asyncio.get_running_loop().call_later(GATHERING_WAIT_S, self._send, gathering)
        starts = gathering.add(parts, int(time.time() * 1000), size, deadline)
        arrival.end()
        # shielded: a request whose client went away must not cancel the write the others wait for
        return placed(await asyncio.shield(gathering.done), starts)

    def _arrived(self) -> None:
        self._arriving -= 1
        if self._arriving or not self._gatherings:
            return
        loop = asyncio.get_running_loop()
        self._quiet_since = time.monotonic()
        gathered = sum(g.requests for g in self._gatherings.values())
        if self._active <= gathered:  # nothing else in progress: at once (after what the loop has ready)
            loop.call_soon(self._send_all)
        elif not self._quiet_check:
            self._quiet_check = True
            loop.call_later(GATHERING_QUIET_S, self._send_if_quiet)

    def _send_if_quiet(self) -> None:
        self._quiet_check = False
        quiet = time.monotonic() - self._quiet_since
        if not self._arriving and quiet < GATHERING_QUIET_S:  # a request came and went meanwhile: its quiet counts
            self._quiet_check = True
            asyncio.get_running_loop().call_later(GATHERING_QUIET_S - quiet, self._send_if_quiet)
            return
        self._send_all()

    def _send_all(self) -> None:
        if self._arriving:
            return  # a request arriving meanwhile looks again when it has joined
        for gathering in list(self._gatherings.values()):
            self._send(gathering)

    def _send(self, gathering: Gathering) -> None:
        if gathering.sent:
            return
        gathering.sent = True
        if self._gatherings.get(gathering.key) is gathering:
            del self._gatherings[gathering.key]
        task = asyncio.get_running_loop().create_task(self._written(gathering))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _written(self, gathering: Gathering) -> None:
        done = gathering.done
        try:
            outcomes = await self._write(gathering)
        except BaseException as exc:
            done.set_exception(exc)
            done.exception()  # retrieved here too: every request waiting may have gone
            if not isinstance(exc, Exception):
                raise
        else:
            done.set_result(outcomes)
