"""A restarting broker answers no client before it has the cluster's metadata (ADR 0052): a Metadata
answer that leaves out an existing topic makes librdkafka drop the topic's partitions, and a consumer
that saw it mid-roll stayed on a leader that had stepped down, never reading the last records."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from chaos_tools import create_topic, fully_replicated
from dm_broker.protocol.client import KafkaConnection
from group_clients import wait_for
from harness import Cluster
from kafka_acl_rules import metadata_of_topic
from kio.schema.errors import ErrorCode

pytestmark = pytest.mark.timeout(180)

TOPIC = "known"


async def _ask_until(port: int, stop: threading.Event, answers: list[tuple[int, int, int]]) -> None:
    """Connects to the broker on `port` as soon as it accepts a connection, then asks for TOPIC's metadata
    back to back on that connection (a client that just found the broker): (error code, partitions,
    brokers) per answer. A broker that accepted connections before it knew the cluster answers the first
    of them from an empty view."""
    question = metadata_of_topic(TOPIC)
    while not stop.is_set():
        try:
            conn = await KafkaConnection.open("127.0.0.1", port, timeout=0.5)
        except (OSError, TimeoutError):
            await asyncio.sleep(0.002)
            continue
        try:
            while not stop.is_set():
                md = await conn.request(question, timeout=5)
                topic = md.topics[0]
                answers.append((topic.error_code.value, len(topic.partitions), len(md.brokers)))
        except (OSError, ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            await conn.close()


def test_a_restarting_broker_answers_only_with_the_topics_it_will_serve(tmp_path: Path):
    with Cluster(tmp_path, 3) as cluster:
        create_topic(cluster, TOPIC, 3)
        wait_for(lambda: fully_replicated(cluster, TOPIC, 3), 30, what="the topic fully replicated")
        restarting = cluster.brokers[2]
        restarting.stop()
        answers: list[tuple[int, int, int]] = []
        stop = threading.Event()
        asker = threading.Thread(target=asyncio.run, args=(_ask_until(restarting.port, stop, answers),), daemon=True)
        asker.start()
        try:
            restarting.start()
            wait_for(lambda: len(answers) >= 50, 30, interval=0.05, what="answers from the restarted broker")
        finally:
            stop.set()
            asker.join(10)
        wrong = [a for a in answers if a[:2] != (ErrorCode.none.value, 3)]
        assert not wrong, f"{len(wrong)} of {len(answers)} answers did not show {TOPIC} with its 3 partitions " \
                          f"(error code, partitions, brokers): {wrong[:5]}"
