"""Writing a transaction's markers: a COMMIT or ABORT control batch on every partition of the
transaction, through its leader (WriteTxnMarkers for another broker, directly for this one). A marker
that could not be written now (no leader, not enough in-sync replicas, a broker unreachable) is tried
again by the coordinator; a partition whose topic is gone needs none; a partition that refuses the
marker as older than what it has seen (its producer epoch or coordinator epoch) tells this coordinator
it is stale: a newer one completes the transaction."""

from __future__ import annotations

import asyncio
import enum
import logging
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode as E

from ..protocol.build import make, nested
from ..protocol.channels import BrokerChannels
from ..protocol.codec import request_class
from .metadata import TopicPartition, TxnMetadata
from .records import TxnState

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger(__name__)
WRITE_TXN_MARKERS = 27
MARKERS_VERSION = 1
DONE_ERRORS = {E.none, E.unknown_topic_or_partition}
STALE_ERRORS = {E.invalid_producer_epoch, E.transaction_coordinator_fenced}


class Outcome(enum.Enum):
    DONE = "done"
    RETRY = "retry"
    STALE = "stale"


def markers_request(meta: TxnMetadata, coordinator_epoch: int, partitions: list[TopicPartition]):
    cls = request_class(WRITE_TXN_MARKERS, MARKERS_VERSION)
    marker_cls = nested(cls, "WritableTxnMarker")
    topic_cls = nested(cls, "WritableTxnMarkerTopic")
    by_topic: dict[str, list[int]] = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append(p)
    marker = make(marker_cls, producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
                  transaction_result=meta.state == TxnState.PREPARE_COMMIT,
                  topics=tuple(make(topic_cls, name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items()),
                  coordinator_epoch=coordinator_epoch)
    return make(cls, markers=(marker,))


class MarkerWriter:
    def __init__(self, broker: Broker, channels: BrokerChannels) -> None:
        self.broker = broker
        self.channels = channels

    async def write(self, meta: TxnMetadata, coordinator_epoch: int, remaining: set[TopicPartition],
                    reasons: dict[TopicPartition, str]) -> Outcome:
        """Writes the markers of `remaining` (removing those done from it); `reasons` gets why each one left
        in it was not written (the coordinator says so when a transaction stays unfinished)."""
        commit = meta.state == TxnState.PREPARE_COMMIT
        by_leader: dict[int, list[TopicPartition]] = {}
        for topic, p in list(remaining):
            doc = self.broker.topic(topic)
            if doc is None or p >= len(doc.partitions):
                remaining.discard((topic, p))  # the topic was deleted: nothing to mark
                continue
            by_leader.setdefault(doc.partitions[p].leader, []).append((topic, p))
        stale = False
        for leader, partitions in by_leader.items():
            if leader < 0:
                reasons.update(dict.fromkeys(partitions, "no leader"))
                continue
            if leader == self.broker.node_id:
                errors = await asyncio.gather(*(self.broker.write_marker(*tp, meta.producer_id, meta.producer_epoch,
                                                                         commit, coordinator_epoch)
                                                for tp in partitions))
                results = dict(zip(partitions, errors, strict=True))
            else:
                results = await self._remote(leader, meta, coordinator_epoch, partitions)
            for tp, error in results.items():
                if error in DONE_ERRORS:
                    remaining.discard(tp)
                elif error in STALE_ERRORS:
                    log.warning("%s: %s-%d refused the marker (%s): a newer coordinator has the transaction",
                                meta.transactional_id, *tp, error.name)
                    stale = True
                else:
                    log.debug("%s: marker for %s-%d not written yet: %s", meta.transactional_id, *tp, error.name)
                    reasons[tp] = f"{error.name} from broker {leader}"
        if stale:
            return Outcome.STALE
        return Outcome.DONE if not remaining else Outcome.RETRY

    async def _remote(self, node: int, meta: TxnMetadata, coordinator_epoch: int,
                      partitions: list[TopicPartition]) -> dict[TopicPartition, E]:
        try:
            resp = await self.channels.request(node, markers_request(meta, coordinator_epoch, partitions),
                                               timeout=30)
        except ConnectionError as exc:
            log.debug("%s: markers to broker %d: %s", meta.transactional_id, node, exc)
            return dict.fromkeys(partitions, E.coordinator_not_available)
        out: dict[TopicPartition, E] = {}
        for marker in resp.markers:
            for topic in marker.topics:
                for p in topic.partitions:
                    out[(topic.name, p.partition_index)] = E(p.error_code)
        return out

