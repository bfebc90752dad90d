"""Not a test (pytest does not collect it): how issue 65's duplicates were found. An idempotent librdkafka producer
writes to six partitions of a 6-broker cluster while the partitions are reassigned at random (with preferred
elections) and a random broker is paused (SIGSTOP) for 1-3.5 s every 2-5 s; librdkafka's eos/msg/broker debug log
goes to OUT/rdkafka.log. Afterwards every acknowledged record must be read back once and in order, and
`grep -c 'bumped epoch' OUT/rdkafka.log` counts librdkafka's epoch bumps (each may write twice what it had not seen
acknowledged). Run beside a CPU hog (stress-ng --cpu 2):

    .venv/bin/python tests/chaos/epoch_bump_probe.py /tmp/probe 12

Before ADR 0060: an epoch bump after OUT_OF_ORDER_SEQUENCE_NUMBER in 10 rounds; after: none in 12 (docs/testing.md).
"""

from __future__ import annotations

import json
import logging
import pathlib
import random
import signal
import sys
import threading
import time

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parent.parent)]

from chaos_tools import FAST_FAILURE, SequenceProducer, verify  # noqa: E402
from clients import ConfluentClient  # noqa: E402
from group_clients import wait_for  # noqa: E402
from harness import Cluster, run_dm  # noqa: E402


def pause_brokers(cluster: Cluster, stop: threading.Event) -> None:
    while not stop.is_set():
        time.sleep(random.uniform(2, 5))
        broker = random.choice(cluster.brokers)
        if broker.proc is None or broker.proc.poll() is not None:
            continue
        broker.proc.send_signal(signal.SIGSTOP)
        time.sleep(random.uniform(1.0, 3.5))
        broker.proc.send_signal(signal.SIGCONT)
        print("paused", broker.node_id, flush=True)


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    (out / "cluster").mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger("rdkafka")
    logger.setLevel(logging.DEBUG)
    handler = logging.FileHandler(out / "rdkafka.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger.addHandler(handler)
    cluster = Cluster(out / "cluster", brokers=6,
                      overrides={**FAST_FAILURE, "leader.replication.throttled.rate": 300_000})
    stop = threading.Event()
    try:
        cluster.controller.start()
        for broker in cluster.brokers:
            broker.start()
        ConfluentClient(cluster.bootstrap).create_topic("live", 6, {"min.insync.replicas": "2"}, replication_factor=3)
        producer = SequenceProducer(cluster.bootstrap, "live", 6,
                                    config={"debug": "eos,msg,broker", "logger": logger})
        producer.start()
        wait_for(lambda: len(producer.acked) > 300, what="acks")
        pauser = threading.Thread(target=pause_brokers, args=(cluster, stop), daemon=True)
        pauser.start()
        for i in range(rounds):
            moves = [{"topic": "live", "partition": p, "replicas": random.sample(range(6), 3)} for p in range(6)]
            plan = {"version": 1, "partitions": moves}
            (out / "plan.json").write_text(json.dumps(plan))
            moved = run_dm("topics", "reassign", str(out / "plan.json"), "--throttle", "2000000",
                           "--bootstrap", cluster.bootstrap, timeout=300)
            print("round", i, moved.returncode, flush=True)
            run_dm("topics", "elect-leaders", "live", "--bootstrap", cluster.bootstrap, timeout=300)
        stop.set()
        pauser.join()
        producer.stop.set()
        producer.join(150)
        print("RESULT", verify(cluster.bootstrap, "live", producer, 6), "errors", producer.errors[:3], flush=True)
    finally:
        stop.set()
        for broker in cluster.brokers:
            if broker.proc is not None and broker.proc.poll() is None:
                broker.proc.send_signal(signal.SIGCONT)
            broker.stop()
        cluster.controller.stop()


if __name__ == "__main__":
    main()
