"""ADR 0009: an acks=all produce releases its connection once its batches are appended, answers
stay in request order, and requests sent just before a client closes are still handled."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from chaos_tools import create_topic, fully_replicated
from dm_broker.protocol.client import KafkaConnection, decode_response, encode_request
from group_clients import wait_for
from harness import Cluster, running_broker
from kio.schema.errors import ErrorCode
from wire import PRODUCE_VERSION, batch, create_topics_request, produce_request

pytestmark = pytest.mark.timeout(120)

# followers stopped for a few seconds must stay registered and in the ISR
PATIENT = {"broker.session.timeout.ms": 30000, "replica.lag.time.max.ms": 30000}


def produce_frame(correlation_id: int, topic: str, values: list[bytes], acks: int = -1) -> bytes:
    return encode_request(0, PRODUCE_VERSION, correlation_id, produce_request(topic, 0, batch(values), acks=acks))


def test_next_request_is_appended_while_an_acks_all_produce_waits(tmp_path: Path):
    with Cluster(tmp_path, 3, PATIENT) as cluster:
        create_topic(cluster, "piped", 1)
        wait_for(lambda: fully_replicated(cluster, "piped", 1), timeout=30, what="ISR of 3")
        leader = cluster.brokers[cluster.leader("piped", 0)]
        followers = [b for b in cluster.brokers if b is not leader]
        # The controller's ISR is all replicas from creation on; under load a broker may apply the new
        # topic later (the leader once answered UNKNOWN_TOPIC_OR_PARTITION to the first request).
        wait_for(lambda: all(b.sample("dm_log_end_offset", topic="piped", partition="0") is not None
                             for b in cluster.brokers), timeout=30, what="every replica hosting the log")

        def log_end() -> float:
            return leader.metric("dm_log_end_offset", topic="piped", partition="0")

        async def scenario() -> list[tuple[int, object]]:
            conn = await KafkaConnection.open(leader.host, leader.port)
            for f in followers:
                os.kill(f.proc.pid, signal.SIGSTOP)
            try:
                await conn.send_raw(produce_frame(1, "piped", [b"a1", b"a2"]) + produce_frame(2, "piped", [b"b1"]))
                # both batches are appended although neither can be committed yet (generous: on a
                # loaded CI machine beside kind, a broker may be starved for seconds)
                seen: list[float] = []
                try:
                    await asyncio.to_thread(wait_for, lambda: seen.append(log_end()) or seen[-1] == 3, timeout=30,
                                            what="second request appended")
                except AssertionError as exc:
                    # what the leader answered, to tell a refused request from a slow one
                    for f in followers:
                        os.kill(f.proc.pid, signal.SIGCONT)
                    answered = []
                    for _ in range(2):
                        try:
                            answered.append(decode_response(0, PRODUCE_VERSION, await conn.read_frame(timeout=15)))
                        except TimeoutError:
                            answered.append("no answer in 15 s")
                    raise AssertionError(f"{exc}; log end offsets seen: {sorted(set(seen))}; answers: {answered}; "
                                         f"leader now {cluster.leader('piped', 0)}, was "
                                         f"{cluster.brokers.index(leader)}") from None
                assert leader.metric("dm_high_watermark", topic="piped", partition="0") == 0
                with pytest.raises(TimeoutError):
                    await conn.read_frame(timeout=0.5)
            finally:
                for f in followers:
                    os.kill(f.proc.pid, signal.SIGCONT)
            answers = [decode_response(0, PRODUCE_VERSION, await conn.read_frame(timeout=15)) for _ in range(2)]
            await conn.close()
            return answers

        answers = asyncio.run(scenario())
        assert [correlation for correlation, _ in answers] == [1, 2]
        parts = [resp.responses[0].partition_responses[0] for _, resp in answers]
        assert [p.error_code for p in parts] == [ErrorCode.none, ErrorCode.none]
        assert [p.base_offset for p in parts] == [0, 2]


def test_acks_zero_batches_sent_just_before_close_are_appended(tmp_path: Path):
    with running_broker(tmp_path / "b") as broker:
        async def scenario() -> None:
            conn = await KafkaConnection.open(broker.host, broker.port)
            await conn.request(create_topics_request("zero", 1, {}))
            frames = b"".join(produce_frame(i, "zero", [b"%d" % i], acks=0) for i in range(1, 51))
            await conn.send_raw(frames)
            await conn.close()

        asyncio.run(scenario())
        wait_for(lambda: broker.metric("dm_log_end_offset", topic="zero", partition="0") == 50, timeout=10,
                 what="all 50 acks=0 batches appended")
