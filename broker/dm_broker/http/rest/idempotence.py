"""The REST Proxy writes as an idempotent producer (issue 65), as Confluent's REST Proxy does with its Java
producer (idempotent by default since Kafka 3.0).

A REST produce asked the leader again when the answer said its leadership was moving, on the grounds that
nothing had been appended. But a leader that appended a batch and lost its leadership while waiting for the
in-sync replicas answers NOT_LEADER_OR_FOLLOWER too: the batch was asked of the new leader, which had it
already, and a record acknowledged once was read back twice after a leader pod was deleted.

Each user (what the gatherings tell apart: listener, principal, address, certificate) writes with a producer
id of its own, got with InitProducerId as that user, and numbers its batches per partition. A batch asked
again carries the same producer id, epoch and sequence, so a leader that has it answers with its offset
instead of appending it twice, and the REST Proxy may ask again whatever the error was: a moving leadership,
a timeout, a broker that did not answer. One batch per user and partition is on its way at a time, so a
batch asked again never finds a later one of its partition ahead of it. When a batch's fate stays unknown
(the request's deadline passed) the numbering cannot go on from it: the user's next batch gets a new producer
id, as a Java producer bumps its epoch."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass, field

import crc32c

from ...log.records import CRC_START, LOG_OVERHEAD

_PRODUCER = struct.Struct(">qhi")  # producer id, producer epoch, base sequence
_PRODUCER_AT = 43
_CRC_AT = 17
MAX_SEQUENCE = (1 << 31) - 1
KEPT_IDENTITIES = 10_000  # users whose numbering is remembered (least recently used ones are forgotten)


def stamped(batch: bytes, producer_id: int, epoch: int, base_sequence: int) -> bytes:
    """The batch with the producer id, epoch and base sequence written in, and its CRC computed again."""
    out = bytearray(batch)
    _PRODUCER.pack_into(out, _PRODUCER_AT, producer_id, epoch, base_sequence)
    (length,) = struct.unpack_from(">i", out, 8)
    struct.pack_into(">I", out, _CRC_AT, crc32c.crc32c(memoryview(out)[CRC_START:LOG_OVERHEAD + length]))
    return bytes(out)


@dataclass
class Identity:
    """One user's producer id and epoch, and the next sequence of each (topic, partition)."""

    producer_id: int
    epoch: int
    sequences: dict[tuple[str, int], int] = field(default_factory=dict)
    locks: dict[tuple[str, int], asyncio.Lock] = field(default_factory=dict)
    broken: bool = False  # a batch's fate is unknown: the numbering cannot go on

    def next(self, topic: str, partition: int) -> int:
        return self.sequences.get((topic, partition), 0)

    def advance(self, topic: str, partition: int, records: int) -> None:
        """`records` more of the partition's records were appended."""
        self.sequences[(topic, partition)] = (self.next(topic, partition) + records) & MAX_SEQUENCE

    @contextlib.asynccontextmanager
    async def holding(self, topic: str, partitions: Iterable[int]) -> AsyncIterator[None]:
        """The partitions' turn (one batch each on its way at a time), taken in order, so two gatherings
        over the same partitions never wait for each other in a circle."""
        held: list[asyncio.Lock] = []
        try:
            for partition in sorted(partitions):
                lock = self.locks.setdefault((topic, partition), asyncio.Lock())
                await lock.acquire()
                held.append(lock)
            yield
        finally:
            for lock in held:
                lock.release()


class Identities:
    """The users' identities, made with `init` (InitProducerId as the user: (producer id, epoch))."""

    def __init__(self, init: Callable[[object], Awaitable[tuple[int, int]]]) -> None:
        self._init = init
        self._known: OrderedDict[Hashable, Identity] = OrderedDict()
        self._making: dict[Hashable, asyncio.Future[Identity]] = {}

    async def of(self, user: Hashable, session: object) -> Identity:
        """The user's identity; a new producer id when it has none or its numbering broke."""
        identity = self._known.get(user)
        if identity is not None and not identity.broken:
            self._known.move_to_end(user)
            return identity
        making = self._making.get(user)
        if making is None:
            making = self._making[user] = asyncio.get_running_loop().create_future()
            try:
                producer_id, epoch = await self._init(session)
            except BaseException as exc:
                making.set_exception(exc)
                making.exception()  # retrieved: the callers waiting get it, none left unretrieved
                raise
            finally:
                self._making.pop(user, None)
            identity = Identity(producer_id, epoch)
            if old := self._known.get(user):
                identity.locks = old.locks  # batches of the broken one still on their way keep their turn
            self._known[user] = identity
            self._known.move_to_end(user)
            while len(self._known) > KEPT_IDENTITIES:
                self._known.popitem(last=False)
            making.set_result(identity)
            return identity
        return await asyncio.shield(making)
