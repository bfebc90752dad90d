"""KIP-890 on the partition leader: before it appends the first transactional batch of a producer that
has no transaction open in the partition, the leader asks the producer's transaction coordinator
whether the partition is in the producer's ongoing transaction (AddPartitionsToTxn v4+, `verify_only`)
— or, for a client of transaction version 2 (Produce v12+), adds it (`verify_only` false: the client
sends no AddPartitionsToTxn of its own). A late or retried write of a transaction that has ended is
so refused instead of starting a transaction nobody will end.

The answer is valid only until the next marker for that producer is written in the partition
(`Partition.marker_count`): the append checks that no marker came in between (the verification guard)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode as E

from ..protocol.build import make, nested
from ..protocol.channels import BrokerChannels
from ..protocol.codec import request_class
from .coordinator import TXN_TOPIC

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger(__name__)
ADD_PARTITIONS_TO_TXN = 24
BROKER_VERSION = 5
# What a producer is told when the coordinator cannot answer: a retriable error it knows.
RETRIABLE = {E.not_coordinator, E.coordinator_not_available, E.coordinator_load_in_progress,
             E.concurrent_transactions}


def verify_request(tid: str, producer_id: int, epoch: int, topic: str, partition: int, add: bool):
    cls = request_class(ADD_PARTITIONS_TO_TXN, BROKER_VERSION)
    txn_cls = nested(cls, "AddPartitionsToTxnTransaction")
    topic_cls = nested(cls, "AddPartitionsToTxnTopic")
    return make(cls, transactions=(make(txn_cls, transactional_id=tid, producer_id=producer_id,
                                        producer_epoch=epoch, verify_only=not add,
                                        topics=(make(topic_cls, name=topic, partitions=(partition,)),)),),
                v3_and_below_transactional_id="", v3_and_below_producer_id=-1, v3_and_below_producer_epoch=-1,
                v3_and_below_topics=())


class TxnVerifier:
    def __init__(self, broker: Broker, channels: BrokerChannels) -> None:
        self.broker = broker
        self.channels = channels

    async def check(self, tid: str, producer_id: int, epoch: int, topic: str, partition: int, add: bool) -> E:
        """NONE when the write belongs to the producer's ongoing transaction (which now holds the
        partition, with `add`); otherwise the coordinator's error."""
        coordinator = self.broker.txn_coordinator
        txn_partition = coordinator.partition_for(tid)
        doc = self.broker.topic(TXN_TOPIC)
        leader = doc.partitions[txn_partition].leader if doc is not None and txn_partition < len(doc.partitions) \
            else -1
        if leader < 0:
            return E.coordinator_not_available
        if leader == self.broker.node_id:
            if add:
                return await coordinator.add_partitions(tid, producer_id, epoch, {(topic, partition)}, client_version=2)
            return coordinator.verify(tid, producer_id, epoch, {(topic, partition)})[(topic, partition)]
        try:
            resp = await self.channels.request(leader, verify_request(tid, producer_id, epoch, topic, partition, add),
                                               timeout=10)
        except ConnectionError as exc:
            log.debug("verifying %s with broker %d: %s", tid, leader, exc)
            return E.coordinator_not_available
        if resp.error_code:
            return E(resp.error_code)
        for result in resp.results_by_transaction:
            for t in result.topic_results:
                for p in t.results_by_partition:
                    if t.name == topic and p.partition_index == partition:
                        return E(p.partition_error_code)
        return E.unknown_server_error
