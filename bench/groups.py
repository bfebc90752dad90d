"""Consumer-group benchmarks.

    .venv/bin/python -m bench.groups [--rounds 5] [--heartbeat-ms 500]

1. Rebalance time: a sixth member joins a stable group of five (confluent-kafka, range
   assignor); time from its subscribe() to the coordinator reporting the group Stable with six
   members (sampled from /metrics every 5 ms). Existing members learn of a rebalance from their
   next heartbeat, so the result depends on heartbeat.interval.ms, as with Kafka.
2. Throughput: 3 consumer processes in one group read a 6-partition topic of 1 KiB records.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import threading
import time
import urllib.request
from pathlib import Path

from .brokers import dm_broker, free_port

RESULTS = Path(__file__).parent / "results"


def stable_members(http_port: int, group: str) -> int:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "dm_group_members" and sample.labels == {"group": group, "state": "Stable"}:
                return int(sample.value)
    return 0


def member(bootstrap: str, group: str, topic: str, heartbeat_ms: int, stop: threading.Event) -> None:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": 10000,
                  "heartbeat.interval.ms": heartbeat_ms, "partition.assignment.strategy": "range"})
    c.subscribe([topic])
    while not stop.is_set():
        c.poll(0.05)
    c.close()


def rebalance_times(bootstrap: str, http_port: int, rounds: int, heartbeat_ms: int) -> list[float]:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("rebalance", 12, 1)])["rebalance"].result(10)
    times = []
    for r in range(rounds):
        group = f"bench-{r}"
        stop = threading.Event()
        threads = [threading.Thread(target=member, args=(bootstrap, group, "rebalance", heartbeat_ms, stop))
                   for _ in range(5)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while stable_members(http_port, group) != 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1)
        sixth = threading.Thread(target=member, args=(bootstrap, group, "rebalance", heartbeat_ms, stop))
        started = time.monotonic()
        sixth.start()
        while stable_members(http_port, group) != 6 and time.monotonic() < deadline:
            time.sleep(0.005)
        times.append(time.monotonic() - started)
        stop.set()
        for t in [*threads, sixth]:
            t.join(30)
    return times


def _consume(bootstrap: str, group: str, topic: str, total: int, counter, done) -> None:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": True, "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760})
    c.subscribe([topic])
    while counter.value < total and not done.is_set():
        n = sum(1 for m in c.consume(10000, 0.5) if m.error() is None)
        with counter.get_lock():
            counter.value += n
    c.close()


def group_throughput(bootstrap: str, records: int) -> float:
    import subprocess
    import sys

    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("group-read", 6, 1)])["group-read"].result(10)
    subprocess.run([sys.executable, "-m", "dm_broker.cli", "bench", "produce", "--bootstrap", bootstrap, "--topic",
                    "group-read", "--records", str(records), "--record-size", "1024", "--quiet"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    counter = multiprocessing.Value("q", 0)
    done = multiprocessing.Event()
    procs = [multiprocessing.Process(target=_consume, args=(bootstrap, "readers", "group-read", records, counter,
                                                           done)) for _ in range(3)]
    started = time.monotonic()
    for p in procs:
        p.start()
    while counter.value < records and time.monotonic() - started < 300:
        time.sleep(0.01)
    elapsed = time.monotonic() - started
    done.set()
    for p in procs:
        p.join(30)
    return counter.value / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--heartbeat-ms", type=int, default=500)
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    http_port = free_port()
    with dm_broker("group.initial.rebalance.delay.ms=0", http_port=http_port) as (bootstrap, _):
        time.sleep(1)
        times = rebalance_times(bootstrap, http_port, args.rounds, args.heartbeat_ms)
        print(f"rebalance after a 6th member joins a stable group of 5 (heartbeat {args.heartbeat_ms} ms): "
              f"median {statistics.median(times):.3f} s, max {max(times):.3f} s, runs {[round(t, 3) for t in times]}")
        rate = group_throughput(bootstrap, args.records)
        print(f"3-member group consume, 6 partitions, 1 KiB: {rate:,.0f} records/s ({rate * 1024 / 1e6:.0f} MB/s)")
    RESULTS.mkdir(exist_ok=True)
    with (RESULTS / "groups.jsonl").open("a") as fh:
        fh.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "heartbeat_ms": args.heartbeat_ms,
                             "rebalance_s": times, "group_consume_records_per_s": rate}) + "\n")


if __name__ == "__main__":
    main()
