"""Consumer-group benchmarks.

    .venv/bin/python -m bench.groups [--rounds 5] [--heartbeat-ms 500] [--skip-throughput]

1. Rebalance time: a sixth member joins a stable group of five (confluent-kafka, range
   assignor); time from its subscribe() to the coordinator reporting the group Stable with six
   members (sampled from /metrics every 5 ms). Existing members learn of a rebalance from their
   next heartbeat, so the result depends on heartbeat.interval.ms, as with Kafka.
2. Under load, classic against KIP-848 (issue 28): ten members read a 22-partition topic that a
   producer keeps writing (about 2,000 records/s); an eleventh joins. Reported per protocol: the time
   until the group is Stable with 11 members, every one reconciled (KIP-848: all at the assignment
   epoch); for records produced between the join and Stable, each partition's worst produce-to-consume
   latency (a stop-the-world rebalance makes every partition wait it out; an incremental one only the
   partitions that move), as the median over partitions, the maximum and the count above 0.2 s, beside
   the same figures for the 3 s before the join.
   Classic members use the
   eager range assignor and, separately, cooperative-sticky; KIP-848 members the broker's uniform
   assignor. Heartbeats every `--heartbeat-ms` for all three.
3. Throughput: 3 consumer processes in one group read a 6-partition topic of 1 KiB records.
4. Share groups (KIP-932): 1, 4 and 16 ShareConsumer processes (implicit acknowledgement) in one share
   group drain a 1-partition topic of 100-byte records written beforehand (share.auto.offset.reset=earliest);
   records/s from the first consumer's start to the last record, and how many were delivered twice.
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


LOAD_PARTITIONS = 22
PROTOCOLS = ("classic-range", "classic-cooperative", "consumer")


def load_member(bootstrap: str, group: str, topic: str, protocol: str, heartbeat_ms: int, stop: threading.Event,
                arrivals: list[tuple[int, float, float]]) -> None:
    from confluent_kafka import Consumer

    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "latest"}
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"  # the broker's heartbeat interval and assignor
    else:
        conf.update({"session.timeout.ms": 10000, "heartbeat.interval.ms": heartbeat_ms,
                     "partition.assignment.strategy": "range" if protocol == "classic-range" else "cooperative-sticky"})
    c = Consumer(conf)
    c.subscribe([topic])
    while not stop.is_set():
        for m in c.consume(1000, 0.02):
            if m.error() is None:
                arrivals.append((m.partition(), m.timestamp()[1] / 1000, time.time()))
    c.close()


def _produce_steadily(bootstrap: str, topic: str, stop: threading.Event, rate: int = 2000) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "partitioner": "random"})
    while not stop.is_set():
        for _ in range(rate // 100):
            p.produce(topic, b"x" * 100)
        p.poll(0)
        time.sleep(0.01)
    p.flush(10)


def _latencies(arrivals: list[tuple[int, float, float]], start: float, end: float) -> dict:
    """Records produced in [start, end]: each partition's worst produce-to-consume latency. A partition
    that a rebalance stops waits out the rebalance, so its worst latency is about that long; one that
    keeps its owner reads on."""
    worst: dict[int, float] = {}
    for partition, produced, consumed in arrivals:
        if start <= produced <= end:
            worst[partition] = max(worst.get(partition, 0.0), consumed - produced)
    values = sorted(worst.values()) or [0.0]
    return {"partition_worst_median_s": statistics.median(values), "partition_worst_max_s": values[-1],
            "partitions_over_fifth_s": sum(v > 0.2 for v in values)}


def rebalance_under_load(bootstrap: str, http_port: int, protocol: str, rounds: int, heartbeat_ms: int) -> list[dict]:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    out = []
    for r in range(rounds):
        topic, group = f"load-{protocol}-{r}", f"load-{protocol}-{r}"
        admin.create_topics([NewTopic(topic, LOAD_PARTITIONS, 1)])[topic].result(10)
        stop = threading.Event()
        arrivals: list[tuple[int, float, float]] = []
        producer = threading.Thread(target=_produce_steadily, args=(bootstrap, topic, stop))
        producer.start()
        members = [threading.Thread(target=load_member, args=(bootstrap, group, topic, protocol, heartbeat_ms, stop,
                                                              arrivals)) for _ in range(10)]
        for t in members:
            t.start()
        deadline = time.monotonic() + 90
        while stable_members(http_port, group) != 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(3)
        baseline_from = time.time()
        time.sleep(3)
        joined_at = time.time()
        joined_mono = time.monotonic()
        eleventh = threading.Thread(target=load_member, args=(bootstrap, group, topic, protocol, heartbeat_ms, stop,
                                                              arrivals))
        eleventh.start()
        while stable_members(http_port, group) != 11 and time.monotonic() < deadline:
            time.sleep(0.005)
        stable_at = time.time()
        rebalance_s = time.monotonic() - joined_mono
        time.sleep(3)  # records produced during the rebalance are read by now
        snapshot = list(arrivals)
        out.append({"protocol": protocol, "rebalance_s": rebalance_s, **_latencies(snapshot, joined_at, stable_at),
                    "baseline": _latencies(snapshot, baseline_from, joined_at)})
        stop.set()
        for t in [*members, eleventh, producer]:
            t.join(30)
    return out


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


def _share_consume(bootstrap: str, group: str, topic: str, total: int, counter, done, seen) -> None:
    from confluent_kafka import ShareConsumer

    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    c.subscribe([topic])
    offsets = []
    while counter.value < total and not done.is_set():
        got = [m.offset() for m in c.poll(0.5) if m.error() is None]
        offsets += got
        with counter.get_lock():
            counter.value += len(got)
    # implicit mode accepts a poll's records at the next poll or commit: without this, close() gives the
    # last poll's records back and another consumer gets them again
    c.commit_sync(10)
    c.close()
    seen.put(offsets)


def share_throughput(bootstrap: str, consumers: int, records: int) -> dict:
    import subprocess
    import sys

    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewTopic,
        ResourceType,
    )

    topic = group = f"share-{consumers}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(10)
    subprocess.run([sys.executable, "-m", "dm_broker.cli", "bench", "produce", "--bootstrap", bootstrap, "--topic",
                    topic, "--records", str(records), "--record-size", "100", "--quiet"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    counter = multiprocessing.Value("q", 0)
    done = multiprocessing.Event()
    seen: multiprocessing.Queue = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=_share_consume, args=(bootstrap, group, topic, records, counter, done,
                                                                 seen)) for _ in range(consumers)]
    started = time.monotonic()
    for p in procs:
        p.start()
    while counter.value < records and time.monotonic() - started < 300:
        time.sleep(0.01)
    elapsed = time.monotonic() - started
    done.set()
    offsets: list[int] = []
    per_consumer = []
    for _ in procs:
        got = seen.get(timeout=60)
        per_consumer.append(len(got))
        offsets += got
    for p in procs:
        p.join(30)
    return {"consumers": consumers, "records_per_s": len(set(offsets)) / elapsed,
            "delivered_twice": len(offsets) - len(set(offsets)), "per_consumer": sorted(per_consumer, reverse=True)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--heartbeat-ms", type=int, default=500)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--load-rounds", type=int, default=3, help="rounds of the 10 -> 11 members test per protocol")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--share-records", type=int, default=100_000)
    parser.add_argument("--only-share", action="store_true", help="run only the share-group throughput")
    args = parser.parse_args()
    http_port = free_port()
    kip848 = [f"group.consumer.heartbeat.interval.ms={args.heartbeat_ms}",
              "group.consumer.min.heartbeat.interval.ms=100", "group.consumer.min.session.timeout.ms=1000",
              "group.consumer.session.timeout.ms=10000"]
    with dm_broker("group.initial.rebalance.delay.ms=0", *kip848, http_port=http_port) as (bootstrap, _):
        time.sleep(1)
        shares = []
        for consumers in (1, 4, 16):
            shares.append(share_throughput(bootstrap, consumers, args.share_records))
            r = shares[-1]
            print(f"share group, {consumers} consumers on 1 partition, 100 B: {r['records_per_s']:,.0f} records/s, "
                  f"{r['delivered_twice']} delivered twice, per consumer {r['per_consumer']}")
        if args.only_share:
            return
        times = rebalance_times(bootstrap, http_port, args.rounds, args.heartbeat_ms)
        print(f"rebalance after a 6th member joins a stable group of 5 (heartbeat {args.heartbeat_ms} ms): "
              f"median {statistics.median(times):.3f} s, max {max(times):.3f} s, runs {[round(t, 3) for t in times]}")
        loaded = []
        for protocol in PROTOCOLS:
            runs = rebalance_under_load(bootstrap, http_port, protocol, args.load_rounds, args.heartbeat_ms)
            loaded += runs
            print(f"10 -> 11 members under load, {protocol}: rebalance median "
                  f"{statistics.median(r['rebalance_s'] for r in runs):.2f} s; per run, partitions whose records "
                  f"waited > 0.2 s {[r['partitions_over_fifth_s'] for r in runs]} of {LOAD_PARTITIONS} (before the "
                  f"join {[r['baseline']['partitions_over_fifth_s'] for r in runs]}); median partition's worst wait "
                  f"{[round(r['partition_worst_median_s'], 2) for r in runs]} s (before "
                  f"{[round(r['baseline']['partition_worst_median_s'], 2) for r in runs]}); worst wait "
                  f"{[round(r['partition_worst_max_s'], 2) for r in runs]} s")
        rate = None
        if not args.skip_throughput:
            rate = group_throughput(bootstrap, args.records)
            print(f"3-member group consume, 6 partitions, 1 KiB: {rate:,.0f} records/s ({rate * 1024 / 1e6:.0f} MB/s)")
    RESULTS.mkdir(exist_ok=True)
    with (RESULTS / "groups.jsonl").open("a") as fh:
        fh.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "heartbeat_ms": args.heartbeat_ms,
                             "rebalance_s": times, "under_load": loaded, "group_consume_records_per_s": rate,
                             "share": shares}) + "\n")


if __name__ == "__main__":
    main()
