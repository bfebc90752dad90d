"""A transactional producer spoken in raw protocol (kio requests on one connection), for tests that need
exact control the client libraries do not give: holding a Produce back and sending it late, choosing
the transaction version (EndTxn v5 and Produce v12 are KIP-890's), sending malformed requests."""

from __future__ import annotations

import datetime
import time
from typing import Any

from dm_broker.log.records import TRANSACTIONAL_BIT, build_batch
from dm_broker.protocol.build import make, nested
from dm_broker.protocol.client import KafkaConnection
from dm_broker.protocol.codec import request_class


def request(api_key: int, version: int, **fields: Any) -> Any:
    return make(request_class(api_key, version), **fields)


def find_coordinator(txn_id: str, version: int = 4) -> Any:
    return request(10, version, key=txn_id, key_type=1, coordinator_keys=(txn_id,))


def init_producer_id(txn_id: str | None, timeout_ms: int = 60_000, version: int = 4, producer_id: int = -1,
                     epoch: int = -1) -> Any:
    timeout = datetime.timedelta(milliseconds=timeout_ms)
    return request(22, version, transactional_id=txn_id, transaction_timeout=timeout, producer_id=producer_id,
                   producer_epoch=epoch)


def add_partitions(txn_id: str, producer_id: int, epoch: int, topic: str, partitions: list[int],
                   version: int = 3) -> Any:
    cls = request_class(24, version)
    topic_cls = nested(cls, "AddPartitionsToTxnTopic")
    return make(cls, v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=producer_id,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=(topic_cls(name=topic, partitions=tuple(partitions)),))


def end_txn(txn_id: str, producer_id: int, epoch: int, commit: bool, version: int = 3) -> Any:
    return request(26, version, transactional_id=txn_id, producer_id=producer_id, producer_epoch=epoch,
                   committed=commit)


def produce(txn_id: str | None, topic: str, partition: int, records: bytes, version: int = 9) -> Any:
    cls = request_class(0, version)
    topic_cls = nested(cls, "TopicProduceData")
    part_cls = nested(cls, "PartitionProduceData")
    return make(cls, transactional_id=txn_id, acks=-1, timeout=datetime.timedelta(seconds=10),
                topic_data=(topic_cls(name=topic, partition_data=(part_cls(index=partition, records=records),)),))


def txn_records(values: list[bytes], producer_id: int, epoch: int, sequence: int, transactional: bool = True) -> bytes:
    return build_batch([(None, v, []) for v in values], timestamp_ms=int(time.time() * 1000), producer_id=producer_id,
                       producer_epoch=epoch, base_sequence=sequence,
                       attributes_extra=TRANSACTIONAL_BIT if transactional else 0)


def produce_error(resp: Any) -> int:
    return int(resp.responses[0].partition_responses[0].error_code)


class RawTxnProducer:
    """InitProducerId, AddPartitionsToTxn, Produce and EndTxn on one connection to a broker that
    coordinates the id and leads the partitions (a single-broker cluster)."""

    def __init__(self, conn: KafkaConnection, txn_id: str, topic: str) -> None:
        self.conn, self.txn_id, self.topic = conn, txn_id, topic
        self.producer_id = self.epoch = -1
        self.sequence: dict[int, int] = {}

    @classmethod
    async def open(cls, host: str, port: int, txn_id: str, topic: str) -> RawTxnProducer:
        conn = await KafkaConnection.open(host, port)
        producer = cls(conn, txn_id, topic)
        for _ in range(100):  # __transaction_state is created on first use
            found = await conn.request(find_coordinator(txn_id))
            if found.coordinators[0].error_code == 0:
                break
            await _sleep(0.1)
        await producer.init()
        return producer

    async def init(self, **kwargs: Any) -> int:
        for _ in range(100):
            resp = await self.conn.request(init_producer_id(self.txn_id, **kwargs))
            if int(resp.error_code) not in (51, 14, 15):  # CONCURRENT_TRANSACTIONS, loading, not available
                break
            await _sleep(0.1)
        if int(resp.error_code) == 0:
            self.producer_id, self.epoch = resp.producer_id, resp.producer_epoch
            self.sequence = {}
        return int(resp.error_code)

    async def add(self, partitions: list[int]) -> list[int]:
        resp = await self.conn.request(add_partitions(self.txn_id, self.producer_id, self.epoch, self.topic,
                                                      partitions))
        return [int(p.partition_error_code) for t in resp.results_by_topic_v3_and_below for p in t.results_by_partition]

    def batch(self, partition: int, values: list[bytes]) -> Any:
        """A Produce request of the next records (not sent): it can be held back and sent later."""
        seq = self.sequence.get(partition, 0)
        self.sequence[partition] = seq + len(values)
        return produce(self.txn_id, self.topic, partition, txn_records(values, self.producer_id, self.epoch, seq),
                       version=self.produce_version)

    produce_version = 9

    async def send(self, req: Any) -> int:
        return produce_error(await self.conn.request(req))

    async def end(self, commit: bool, version: int = 3) -> tuple[int, Any]:
        for _ in range(100):
            resp = await self.conn.request(end_txn(self.txn_id, self.producer_id, self.epoch, commit, version))
            if int(resp.error_code) != 51:
                break
            await _sleep(0.1)
        if version >= 5 and int(resp.error_code) == 0:
            self.producer_id, self.epoch = resp.producer_id, resp.producer_epoch
            self.sequence = {}
        return int(resp.error_code), resp

    async def close(self) -> None:
        await self.conn.close()


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)
