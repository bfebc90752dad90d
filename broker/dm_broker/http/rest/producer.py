"""REST produce: the broker chooses each record's partition (the topic's partitioner settings), writes one
batch per partition as a Produce request (acks=all), with the records of concurrent requests of the same user
(gathering.py), and answers each record's offset or error."""

from __future__ import annotations

import asyncio
import datetime
import itertools
import operator
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from ...controller.models import TopicDoc
from ...log.records import HEADER_SIZE, build_batch, build_keyless_batch, run_deltas
from ...partitioners import Partitioner
from ...protocol.build import make, nested
from ...protocol.codec import request_class
from ...security.acls import Operation, ResourceType
from ...security.session import Session
from .bodies import ProduceRecord
from .errors import (
    KAFKA_ERROR,
    KAFKA_RETRIABLE_ERROR,
    LEADER_NOT_AVAILABLE,
    RECORD_NOT_RETRIABLE,
    RECORD_RETRIABLE,
    RestError,
    forbidden,
    not_found_partition,
    not_found_topic,
)
from .gathering import Arrival, Gatherer, Gathering, Outcome, gathering_key
from .idempotence import Identities, stamped
from .kafka_calls import BrokerUnreachable, KafkaCalls

if TYPE_CHECKING:
    from ...broker import Broker

PRODUCE_VERSION = 9
LIST_OFFSETS_VERSION = 6
RETRY_BACKOFF_S = 0.1
# Answers a leader may give after it appended the batch (leadership lost or the ISR not reached while it waited):
# whether the records were written is not known until the batch is asked again.
_MAYBE_APPENDED = (ErrorCode.not_leader_or_follower, ErrorCode.request_timed_out,
                   ErrorCode.not_enough_replicas_after_append)
INIT_PRODUCER_ID_VERSION = 4


Offset = dict[str, object]  # one record's answer: partition, offset, error_code, error
_PARTITION = operator.attrgetter("partition")
_KEY = operator.attrgetter("key")
_VALUE = operator.attrgetter("value")
_TIMESTAMP = operator.attrgetter("timestamp")
_HEADERS = operator.attrgetter("headers")
_KEY_VALUE_HEADERS = operator.attrgetter("key", "value", "headers")


# The most a record's varints and attributes take in a batch: length, timestamp delta (a long), offset delta,
# key length, value length, header count.
RECORD_OVERHEAD_BOUND = 5 + 1 + 10 + 5 + 5 + 5 + 5
HEADER_OVERHEAD_BOUND = 5 + 5  # a header's key and value lengths


def batch_bytes_bound(records: Sequence[ProduceRecord]) -> int:
    """The most bytes `records` can take in a batch of their own (header included), so that a gathering never
    grows a batch past max.message.bytes when each of its requests' batches alone would have fitted."""
    keys = sum(map(len, filter(None, map(_KEY, records))))
    values = sum(map(len, filter(None, map(_VALUE, records))))
    headers = sum(len(h.key.encode()) + len(h.value or b"") + HEADER_OVERHEAD_BOUND
                  for r in records for h in r.headers) if any(map(_HEADERS, records)) else 0
    return HEADER_SIZE + keys + values + headers + RECORD_OVERHEAD_BOUND * len(records)


@dataclass
class _Chooser:
    identity: tuple[str, int, str, str]  # topic id, partition count, keyed and keyless partitioners
    partitioner: Partitioner
    counted_at: float = 0.0  # monotonic time of the last refresh of loads from the leaders
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def counts_load(self) -> bool:
        return "least_loaded" in (self.partitioner.keyed, self.partitioner.keyless)


def produce_request(topic: str, batches: dict[int, bytes], timeout_s: float) -> object:
    """One Produce request (acks=all) carrying a batch for each of `batches`' partitions, as a Kafka client
    sends one request per leader, not one per partition."""
    cls = request_class(0, PRODUCE_VERSION)
    topic_cls, part_cls = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
    return make(cls, transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=timeout_s),
                topic_data=(topic_cls(name=topic, partition_data=tuple(
                    part_cls(index=partition, records=batch) for partition, batch in batches.items())),))


def list_offsets_request(topic: str, partitions: list[int], timestamp: int) -> object:
    """ListOffsets of `partitions` at `timestamp` (-1: the log end, -2: the log start)."""
    cls = request_class(2, LIST_OFFSETS_VERSION)
    topic_cls, part_cls = nested(cls, "ListOffsetsTopic"), nested(cls, "ListOffsetsPartition")
    return make(cls, replica_id=-1, isolation_level=0,
                topics=(topic_cls(name=topic, partitions=tuple(
                    part_cls(partition_index=p, current_leader_epoch=-1, timestamp=timestamp) for p in partitions)),))


class RestProducer:
    def __init__(self, broker: Broker, calls: KafkaCalls) -> None:
        self.broker = broker
        self.calls = calls
        self._choosers: dict[str, _Chooser] = {}
        self.gatherer = Gatherer(self._write_gathered)
        self.identities = Identities(self._init_producer_id)

    def topic(self, name: str) -> TopicDoc:
        md = self.broker.metadata
        doc = md.topics.get(name) if md is not None else None
        if doc is None:
            raise not_found_topic(name)
        return doc

    async def produce(self, doc: TopicDoc, records: Sequence[ProduceRecord], fixed: int | None, session: Session,
                      arrival: Arrival) -> list[Offset]:
        """Writes `records` (to partition `fixed`, or each where it says or the topic's partitioner chooses) and
        answers each one's offset or error, in order."""
        topic = doc.name
        if not self.broker.security.allowed(session, Operation.WRITE, ResourceType.TOPIC, topic):
            raise forbidden(f"Not authorized to access topics: [{topic}] (WRITE)")
        deadline = time.monotonic() + self.broker.config["http.request.timeout.ms"] / 1000
        # The record indexes of each partition, in record order, grouped in C (sorted, groupby, map): this runs
        # for every REST produce request.
        groups: dict[int, Sequence[int]]
        parts: dict[int, Sequence[ProduceRecord]]
        if fixed is not None:
            groups, parts = {fixed: range(len(records))}, {fixed: records}
        else:
            chosen = await self._placed(topic, doc, records, session)
            order = sorted(range(len(records)), key=chosen.__getitem__)  # stable: record order within each
            groups = {partition: list(indexes) for partition, indexes in itertools.groupby(order, chosen.__getitem__)}
            parts = {partition: list(map(records.__getitem__, indexes)) for partition, indexes in groups.items()}
        outcomes = await self._gathered(doc, parts, batch_bytes_bound(records), session, deadline, arrival)
        offsets: list[Offset] = [{}] * len(records)
        for partition, indexes in groups.items():
            base, code, message = outcomes[partition]
            if code is None:
                answers = [{"partition": partition, "offset": offset, "error_code": None, "error": None}
                           for offset in range(base, base + len(indexes))]
            else:
                failed = {"partition": partition, "offset": None, "error_code": code, "error": message}
                answers = [failed] * len(indexes)
            for index, answer in zip(indexes, answers, strict=True):
                offsets[index] = answer
        return offsets

    async def _placed(self, topic: str, doc: TopicDoc, records: Sequence[ProduceRecord],
                      session: Session) -> list[int]:
        """Each record's partition: the one it names, or the topic's partitioner's choice."""
        chosen: list[int | None] = list(map(_PARTITION, records))
        unplaced = chosen.count(None)
        if unplaced < len(chosen):
            count = len(doc.partitions)
            missing = next((partition for partition in chosen if partition is not None and partition >= count), None)
            if missing is not None:
                raise not_found_partition(topic, missing)
        if unplaced:
            partitioner = (await self._chooser(topic, doc, session)).partitioner
            if unplaced == len(chosen):
                return partitioner.choose_all(list(map(_KEY, records)))
            indexes = [i for i, partition in enumerate(chosen) if partition is None]
            for index, partition in zip(indexes, partitioner.choose_all([records[i].key for i in indexes]),
                                        strict=True):
                chosen[index] = partition
        return chosen  # type: ignore[return-value]  # every None was replaced

    async def _gathered(self, doc: TopicDoc, parts: dict[int, Sequence[ProduceRecord]], size: int, session: Session,
                        deadline: float, arrival: Arrival) -> dict[int, Outcome]:
        """This request's outcome in each of its partitions, written together with the other requests of the
        same user to the same topic that join its gathering (gathering.py); `size`: the most its records can
        add to a batch."""
        limit = int(doc.configs.get("max.message.bytes", self.broker.config["message.max.bytes"]))
        return await self.gatherer.join(gathering_key(doc.name, session), session, parts, size, limit, deadline,
                                        arrival)

    async def _write_gathered(self, gathering: Gathering) -> dict[int, Outcome]:
        """The gathering's batches, written as its user's idempotent producer (idempotence.py)."""
        topic, session = gathering.topic, gathering.session
        try:
            identity = await self.identities.of(gathering.key[1:], session)
        except (BrokerUnreachable, TimeoutError) as exc:
            why = str(exc) or type(exc).__name__
            failed: Outcome = (-1, RECORD_RETRIABLE, f"COORDINATOR_NOT_AVAILABLE: no producer id for the records: "
                                                     f"{why}")
            return dict.fromkeys(gathering.chunks, failed)
        async with identity.holding(topic, gathering.chunks):
            counts = {partition: gathering.count(partition) for partition in gathering.chunks}
            batches = {partition: stamped(self._batch(chunks), identity.producer_id, identity.epoch,
                                          identity.next(topic, partition))
                       for partition, chunks in gathering.chunks.items()}
            outcomes, uncertain = await self._write(topic, batches, session, gathering.deadline)
            for partition, (_, code, _) in outcomes.items():
                if code is None:
                    identity.advance(topic, partition, counts[partition])
            if uncertain:
                identity.broken = True  # what happened to those batches is not known: the user's next gets a new id
        return outcomes

    async def _init_producer_id(self, session: Session) -> tuple[int, int]:
        """A producer id for a user's REST produce: InitProducerId as the user (IDEMPOTENT_WRITE on the cluster
        or WRITE on some topic, as Kafka asks of an idempotent producer)."""
        cls = request_class(22, INIT_PRODUCER_ID_VERSION)
        body = make(cls, transactional_id=None, transaction_timeout=datetime.timedelta(minutes=1), producer_id=-1,
                    producer_epoch=-1)
        answer = await self.calls.call(self.broker.node_id, body, session,
                                       timeout=self.broker.config["http.request.timeout.ms"] / 1000)
        if answer.error_code == ErrorCode.cluster_authorization_failed:
            raise forbidden("Not authorized to produce idempotently (IDEMPOTENT_WRITE on the cluster or WRITE on a "
                            "topic)")
        if answer.error_code != ErrorCode.none:
            raise BrokerUnreachable(f"InitProducerId answered {answer.error_code.name}")
        return answer.producer_id, answer.producer_epoch

    @staticmethod
    def _batch(chunks: list[tuple[Sequence[ProduceRecord], int]]) -> bytes:
        """One batch of the (records, their request's arrival in ms) chunks: each record's timestamp is its
        own, or its request's arrival."""
        records = chunks[0][0] if len(chunks) == 1 else list(itertools.chain.from_iterable(c for c, _ in chunks))
        stamps = list(map(_TIMESTAMP, records))
        first = min(when for _, when in chunks)
        runs = [(len(chunk), when - first) for chunk, when in chunks]  # each request's records, its arrival
        plain = stamps.count(None) == len(stamps)  # no record has a timestamp of its own
        if plain and list(map(_KEY, records)).count(None) == len(records) and not any(map(_HEADERS, records)):
            # the common request (values alone): the keyless encoder
            return build_keyless_batch(list(map(_VALUE, records)), timestamp_ms=first, runs=runs)
        deltas = None
        if not plain:  # records with timestamps of their own
            arrivals = itertools.chain.from_iterable(itertools.repeat(when, len(chunk)) for chunk, when in chunks)
            stamps = [when if stamp is None else stamp for stamp, when in zip(stamps, arrivals, strict=True)]
            first = min(stamps)
            deltas = [stamp - first for stamp in stamps]
        elif any(delta for _, delta in runs):  # requests that arrived in different milliseconds
            deltas = run_deltas(runs)
        if any(map(_HEADERS, records)):
            rows = [(r.key, r.value, [(h.key, h.value) for h in r.headers]) for r in records]
        else:  # no headers: an empty tuple stands for them
            rows = list(map(_KEY_VALUE_HEADERS, records))
        return build_batch(rows, timestamp_ms=first, timestamp_deltas=deltas)

    async def _write(self, topic: str, batches: dict[int, bytes], session: Session,
                     deadline: float) -> tuple[dict[int, Outcome], set[int]]:
        """Each partition's (base offset, None, None) once its ISR has the batch, or (-1, per-record error
        code, message); and the partitions whose batch may or may not have been written (the deadline passed
        while asking). The batches go to their leaders in one Produce request per leader; a batch is asked
        again, of its partition's leader of the moment, after any retriable error until the deadline: it
        carries its producer id and sequence, so a leader that has it does not append it twice."""
        outcomes: dict[int, Outcome] = {}
        uncertain: set[int] = set()
        pending = dict(batches)
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                late: Outcome = (-1, RECORD_RETRIABLE, "REQUEST_TIMED_OUT: no leader took the records in time")
                for partition in pending:
                    outcomes.setdefault(partition, late)
                break
            by_leader: dict[int, dict[int, bytes]] = defaultdict(dict)
            for partition, batch in pending.items():
                by_leader[self._leader(topic, partition)][partition] = batch
            leaderless = by_leader.pop(-1, {})
            asks = [self._ask(leader, topic, part_batches, session, left) for leader, part_batches in by_leader.items()]
            # one leader (the common case of a small cluster or one partition): no task to wrap it in
            answers = [await asks[0]] if len(asks) == 1 else await asyncio.gather(*asks)
            pending = dict(leaderless)
            for part_batches, (answered, again, unsure) in zip(by_leader.values(), answers, strict=True):
                outcomes.update(answered)
                uncertain -= answered.keys() - again
                uncertain |= unsure
                pending.update((partition, part_batches[partition]) for partition in again)
            if pending:
                await asyncio.sleep(min(RETRY_BACKOFF_S, max(deadline - time.monotonic(), 0)))
        return outcomes, uncertain & {p for p, (_, code, _) in outcomes.items() if code is not None}

    async def _ask(self, leader: int, topic: str, batches: dict[int, bytes], session: Session,
                   left: float) -> tuple[dict[int, Outcome], set[int], set[int]]:
        """One Produce request to `leader`: each partition's outcome, the partitions to ask again (a retriable
        error), and those whose batch may have been written meanwhile (no answer, or one given after the
        append: a lost leadership, a timeout)."""
        try:
            response = await self.calls.call(leader, produce_request(topic, batches, left), session,
                                             timeout=left + 5, size=sum(map(len, batches.values())))
        except (BrokerUnreachable, TimeoutError) as exc:
            why = "REQUEST_TIMED_OUT" if isinstance(exc, TimeoutError) else f"NETWORK_EXCEPTION: {exc}"
            failed: Outcome = (-1, RECORD_RETRIABLE, f"{why}: the records may or may not have been written")
            return dict.fromkeys(batches, failed), set(batches), set(batches)
        outcomes: dict[int, Outcome] = dict.fromkeys(
            batches, (-1, RECORD_RETRIABLE, "UNKNOWN_SERVER_ERROR: the leader's answer left the partition out"))
        again: set[int] = set()
        unsure: set[int] = set()
        for answer in response.responses[0].partition_responses:
            error = answer.error_code
            if answer.index not in batches:
                continue
            if error == ErrorCode.none:
                outcomes[answer.index] = (answer.base_offset, None, None)
                continue
            if error == ErrorCode.topic_authorization_failed:
                raise forbidden(f"Not authorized to access topics: [{topic}] (WRITE)")
            if error.retriable:
                again.add(answer.index)
                if error in _MAYBE_APPENDED:
                    unsure.add(answer.index)
            code = RECORD_RETRIABLE if error.retriable else RECORD_NOT_RETRIABLE
            outcomes[answer.index] = (-1, code, f"{error.name.upper()}: {answer.error_message or error.name}")
        return outcomes, again, unsure

    def _leader(self, topic: str, partition: int) -> int:
        md = self.broker.metadata
        doc = md.topics.get(topic) if md is not None else None
        if doc is None or partition >= len(doc.partitions):
            return -1
        return doc.partitions[partition].leader

    async def partition_offsets(self, topic: str, partition: int, session: Session) -> tuple[int, int]:
        """(log start, log end) of one partition, asked of its leader as a ListOffsets from the user."""
        timeout = self.broker.config["http.request.timeout.ms"] / 1000
        offsets = []
        for timestamp in (-2, -1):
            leader = self._leader(topic, partition)
            if leader < 0:
                raise RestError(404, LEADER_NOT_AVAILABLE, f"partition {partition} of {topic} has no leader now")
            try:
                response = await self.calls.call(leader, list_offsets_request(topic, [partition], timestamp),
                                                 session, timeout)
            except (BrokerUnreachable, TimeoutError) as exc:
                raise RestError(500, KAFKA_RETRIABLE_ERROR, f"the leader did not answer: {exc}") from None
            answer = response.topics[0].partitions[0]
            if answer.error_code == ErrorCode.topic_authorization_failed:
                raise forbidden(f"Not authorized to access topics: [{topic}] (DESCRIBE)")
            if answer.error_code != ErrorCode.none:
                raise RestError(500, KAFKA_RETRIABLE_ERROR if answer.error_code.retriable else KAFKA_ERROR,
                                f"{answer.error_code.name.upper()} from the leader of {topic}-{partition}")
            offsets.append(answer.offset)
        return offsets[0], offsets[1]

    # -- the broker's choice of partition ---------------------------------------------------------------

    def _settings(self, doc: TopicDoc) -> tuple[str, str]:
        config = self.broker.config
        return (doc.configs.get("partitioner", config["partitioner"]),
                doc.configs.get("keyless.partitioner", config["keyless.partitioner"]))

    async def _chooser(self, topic: str, doc: TopicDoc, session: Session) -> _Chooser:
        keyed, keyless = self._settings(doc)
        identity = (doc.topic_id, len(doc.partitions), keyed, keyless)
        chooser = self._choosers.get(topic)
        if chooser is None or chooser.identity != identity:
            chooser = self._choosers[topic] = _Chooser(identity, Partitioner(keyed, keyless, len(doc.partitions)))
        if chooser.counts_load:
            refresh_s = self.broker.config["http.partitioner.refresh.ms"] / 1000
            async with chooser.lock:  # one refresh at a time; those waiting use its result
                if time.monotonic() - chooser.counted_at >= refresh_s:
                    loads = await self._cluster_loads(topic, len(doc.partitions), session)
                    if loads is not None:
                        chooser.partitioner.loads = loads
                    chooser.counted_at = time.monotonic()
        return chooser

    async def _cluster_loads(self, topic: str, count: int, session: Session) -> list[int] | None:
        """How many records each partition holds (log end minus log start, as `dm produce` counts), asked of
        its leader; None when some leader did not say (the counts this broker kept stay in use)."""
        by_leader: dict[int, list[int]] = defaultdict(list)
        for partition in range(count):
            by_leader[self._leader(topic, partition)].append(partition)
        if -1 in by_leader:
            return None
        loads = [0] * count
        timeout = self.broker.config["http.request.timeout.ms"] / 1000

        async def ask(leader: int, partitions: list[int], timestamp: int, sign: int) -> bool:
            try:
                response = await self.calls.call(leader, list_offsets_request(topic, partitions, timestamp), session,
                                                 timeout)
            except (BrokerUnreachable, TimeoutError):
                return False
            for answer in response.topics[0].partitions:
                if answer.error_code != ErrorCode.none:
                    return False
                loads[answer.partition_index] += sign * answer.offset
            return True

        answers = await asyncio.gather(*(ask(leader, parts, timestamp, sign) for leader, parts in by_leader.items()
                                         for timestamp, sign in ((-1, 1), (-2, -1))))
        return loads if all(answers) else None
