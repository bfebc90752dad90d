"""An idempotent producer of each JavaScript client (KafkaJS, @platformatic/kafka; acks=all, RF 3,
min.insync.replicas=2) while partition leaders are SIGKILLed: the client's own retry and metadata refresh
against dm's failover, and no record it was told is acknowledged is lost, duplicated or reordered (read back
with librdkafka)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from chaos_tools import FAST_FAILURE, AckTimes, assert_nothing_lost, create_topic, kill_leaders_in_turn, verify
from group_clients import wait_for
from harness import Cluster
from kafkajs import KAFKAJS
from measurements import note
from node_clients import NodeClient
from platformatic import PLATFORMATIC

pytestmark = pytest.mark.timeout(600)
ROUNDS = 6


@dataclass
class Acknowledged(AckTimes):
    """What the producer printed, in verify()'s shape: (partition, offset, value, when)."""

    acked: list[tuple[int, int, bytes, float]] = field(default_factory=list)
    produced_at: dict[bytes, float] = field(default_factory=dict)  # when its send began
    errors: list[str] = field(default_factory=list)
    remaining: int = 0

    def read(self, lines) -> None:
        for line in lines:
            answer = json.loads(line)
            if "sending" in answer:
                self.produced_at[answer["sending"].encode()] = time.monotonic()
            elif "error" in answer:
                self.errors.append(f"{answer['value']}: {answer['error']}")
            elif "value" in answer:
                self.acked.append((answer["partition"], answer["offset"], answer["value"].encode(), time.monotonic()))


@pytest.mark.parametrize("client", [KAFKAJS, PLATFORMATIC], ids=["kafkajs", "platformatic"])
def test_a_javascript_producer_loses_nothing_when_leaders_die(tmp_path: Path, client: NodeClient):
    stop = tmp_path / "stop"
    with Cluster(tmp_path, 3, FAST_FAILURE) as cluster:
        create_topic(cluster, "js", 3)
        producer = client.start("produceUntilStopped", cluster.bootstrap, topic="js", partitions=3, stopFile=str(stop))
        acks = Acknowledged()
        reader = threading.Thread(target=acks.read, args=(producer.stdout,), daemon=True)
        reader.start()
        try:
            wait_for(lambda: len(acks.acked) > 200, 60, what="first acknowledgements")
            failovers = kill_leaders_in_turn(cluster, "js", 3, ROUNDS, acks)
        finally:
            stop.touch()
            producer.wait(60)
            reader.join(10)
        assert producer.returncode == 0, producer.stderr.read()[-3000:]
        result = verify(cluster.bootstrap, "js", acks, 3)
        note(f"[{client.package} leader SIGKILL] acknowledged {result['acked']}, lost {result['lost']}, duplicated "
             f"{result['duplicated']}, reordered {result['reordered']}, misplaced {result['misplaced']}; "
             f"kill→next ack {', '.join(f'{s:.2f}' for s in failovers)} s")
        assert_nothing_lost(result, acks)
