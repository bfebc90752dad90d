"""A batch of an idempotent producer that comes after a gap in its sequence waits for the batches before it
(ADR 0060, issue 65). Seen with librdkafka under load while partitions were reassigned: a batch went to the
partition's new leader while the one before it was still on its way to the old leader (which refused it, not
leader); the new leader answered OUT_OF_ORDER_SEQUENCE_NUMBER, librdkafka bumped its producer epoch and sent
again, under the new epoch, batches that were already written: 50 records twice."""

from __future__ import annotations

import asyncio
import datetime
import time

import pytest
from dm_broker.protocol.build import make
from dm_broker.protocol.client import KafkaConnection
from dm_broker.protocol.codec import request_class
from harness import BrokerProcess
from kio.schema.errors import ErrorCode
from wire import batch, create_topics_request, fetch_request, produce_request

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory):
    with BrokerProcess(tmp_path_factory.mktemp("gaps") / "data") as broker:
        yield broker


async def producer_id(conn: KafkaConnection) -> tuple[int, int]:
    answer = await conn.request(make(request_class(22, 4), transactional_id=None,
                                     transaction_timeout=datetime.timedelta(minutes=1), producer_id=-1,
                                     producer_epoch=-1))
    assert answer.error_code == ErrorCode.none
    return answer.producer_id, answer.producer_epoch


def values(first: int, count: int) -> list[bytes]:
    return [b"%04d" % i for i in range(first, first + count)]


async def send(conn: KafkaConnection, topic: str, pid: int, epoch: int, first: int, count: int) -> ErrorCode:
    answer = await conn.request(produce_request(topic, 0, batch(values(first, count), pid, epoch, first)))
    return answer.responses[0].partition_responses[0].error_code


async def read_all(conn: KafkaConnection, topic: str) -> list[bytes]:
    from dm_broker.log.records import decode_records, iter_batches

    answer = await conn.request(fetch_request(topic, 0, 0))
    records = answer.responses[0].partitions[0].records or b""
    return [r.value for _, h in iter_batches(records) for r in decode_records(records[_:_ + h.size])]


def test_a_batch_after_a_gap_waits_for_the_one_before_it(broker):
    async def scenario() -> None:
        topic = "gap-filled"
        first = await KafkaConnection.open("127.0.0.1", broker.port)
        other = await KafkaConnection.open("127.0.0.1", broker.port)
        try:
            created = await first.request(create_topics_request(topic))
            assert created.topics[0].error_code == ErrorCode.none
            await asyncio.sleep(0.5)
            pid, epoch = await producer_id(first)
            assert await send(first, topic, pid, epoch, 0, 10) == ErrorCode.none
            later = asyncio.create_task(send(first, topic, pid, epoch, 20, 10))  # sequences 10-19 still on their way
            await asyncio.sleep(0.5)
            assert not later.done(), "the later batch was answered before the one it follows arrived"
            assert await send(other, topic, pid, epoch, 10, 10) == ErrorCode.none
            assert await later == ErrorCode.none
            assert await read_all(first, topic) == values(0, 30)
        finally:
            await first.close()
            await other.close()

    asyncio.run(scenario())


def test_a_gap_that_stays_is_out_of_order_after_the_wait(broker):
    async def scenario() -> None:
        topic = "gap-stays"
        conn = await KafkaConnection.open("127.0.0.1", broker.port)
        try:
            assert (await conn.request(create_topics_request(topic))).topics[0].error_code == ErrorCode.none
            await asyncio.sleep(0.5)
            pid, epoch = await producer_id(conn)
            assert await send(conn, topic, pid, epoch, 0, 10) == ErrorCode.none
            started = time.monotonic()
            assert await send(conn, topic, pid, epoch, 20, 10) == ErrorCode.out_of_order_sequence_number
            assert time.monotonic() - started >= 2.5  # SEQUENCE_GAP_WAIT_S, 3 s
            assert await read_all(conn, topic) == values(0, 10)
        finally:
            await conn.close()

    asyncio.run(scenario())
