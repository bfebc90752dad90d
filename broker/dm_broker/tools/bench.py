"""`dm bench produce|consume`: load generator for any Kafka-compatible address (confluent-kafka).

Prints records/s, MB/s and latency percentiles (produce: librdkafka's per-message latency, from
produce() to the delivery report). `--compare HOST:PORT` runs the same workload against a second
broker (e.g. Tansu) and prints the ratio. `--json FILE` appends the result for bench/plot.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from .client import admin, fail, wait
from .client import settings as client_settings


@dataclass
class BenchResult:
    kind: str
    bootstrap: str
    records: int
    record_size: int
    seconds: float
    records_per_s: float
    mb_per_s: float
    latency_ms: dict[str, float] = field(default_factory=dict)
    settings: dict[str, str] = field(default_factory=dict)
    # this process's CPU (librdkafka's threads included) over the timed part, per record: on a machine the
    # client shares with the brokers it is part of what bounds the rate
    client_cpu_us_per_record: float | None = None

    def line(self) -> str:
        lat = ""
        if self.latency_ms:
            lat = "  latency p50 {p50:.2f} ms  p99 {p99:.2f} ms  p99.9 {p999:.2f} ms".format(**self.latency_ms)
        return (f"{self.kind:8s} {self.bootstrap:22s} {self.records:>10,d} x {self.record_size:>6d} B  "
                f"{self.records_per_s:>12,.0f} rec/s  {self.mb_per_s:>9.1f} MB/s{lat}")


def percentiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {}
    samples.sort()

    def pick(q: float) -> float:
        return samples[min(len(samples) - 1, int(q * len(samples)))] * 1000

    return {"p50": pick(0.50), "p99": pick(0.99), "p999": pick(0.999), "mean": statistics.fmean(samples) * 1000}


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic

    client = admin(bootstrap)
    if topic in client.list_topics(timeout=15).topics:
        return
    result = wait(client.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]))[topic]
    if isinstance(result, Exception) and "already exists" not in str(result).lower():
        fail(f"cannot create {topic} on {bootstrap}: {result}")


def _progress(quiet: bool) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:,}/{task.total:,}"),
                    TimeRemainingColumn(), disable=quiet, transient=True)


def produce(bootstrap: str, topic: str, args: argparse.Namespace) -> BenchResult:
    from confluent_kafka import Producer

    settings = {
        "bootstrap.servers": bootstrap, "acks": args.acks, "linger.ms": str(args.linger_ms),
        "batch.size": str(args.batch_size), "compression.type": args.compression,
        "enable.idempotence": str(args.idempotence).lower(), "queue.buffering.max.kbytes": "1048576",
        "queue.buffering.max.messages": "1000000",
        # as Kafka's Java client does: without TCP_NODELAY a small request can sit behind Nagle's
        # algorithm until the broker's delayed ACK (40 ms on Linux) and distort latency
        "socket.nagle.disable": "true",
    }
    producer = Producer(client_settings(settings))
    payload = os.urandom(args.record_size)
    latencies: list[float] = []
    errors = 0

    def on_delivery(err, msg) -> None:
        nonlocal errors
        if err is not None:
            errors += 1
        else:
            latencies.append(msg.latency())

    if args.warm_up:
        # not measured: one record per partition, so the connections to every leader exist and the
        # first measured records do not carry the client's connection setup in their latency
        for partition in producer.list_topics(topic, timeout=10).topics[topic].partitions:
            producer.produce(topic, payload, partition=partition)
        if producer.flush(30):
            fail(f"warm-up records were not acknowledged by {bootstrap}")
    n = args.records
    produce_call = producer.produce
    poll = producer.poll
    # A Python delivery callback per record costs more than producing it; latency is sampled on
    # one record in `sample` (every record is still acknowledged: flush() waits for all).
    sample = max(1, args.latency_sample)
    rate = args.rate
    pace_every = max(1, int(rate / 1000)) if rate else 1
    with _progress(args.quiet) as progress:
        task = progress.add_task(f"produce → {bootstrap}", total=n)
        started = time.perf_counter()
        cpu_started = time.process_time()
        for i in range(n):
            while True:
                try:
                    if i % sample == 0:
                        produce_call(topic, payload, on_delivery=on_delivery)
                    else:
                        produce_call(topic, payload)
                    break
                except BufferError:
                    poll(0.005)
            if i & 255 == 0:
                poll(0)  # serve delivery reports promptly: latency is measured when they are served
            if i & 4095 == 0:
                progress.update(task, completed=i)
            if rate and i % pace_every == 0:
                # open-loop pacing: hold the offered load at --rate records/s
                ahead = started + i / rate - time.perf_counter()
                if ahead > 0:
                    time.sleep(ahead)
        remaining = producer.flush(300)
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
    errors += remaining
    if errors:
        fail(f"{errors} records failed against {bootstrap}")
    return BenchResult("produce", bootstrap, n, args.record_size, elapsed, n / elapsed,
                       n * args.record_size / elapsed / 1e6, percentiles(latencies),
                       {k: v for k, v in settings.items() if k != "bootstrap.servers"}, round(cpu / n * 1e6, 2))


def consume(bootstrap: str, topic: str, args: argparse.Namespace) -> BenchResult:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    settings = {"bootstrap.servers": bootstrap, "group.id": f"dm-bench-{uuid.uuid4().hex[:6]}",
                "enable.auto.commit": "false", "fetch.max.bytes": str(args.fetch_max_bytes),
                "max.partition.fetch.bytes": str(args.fetch_max_bytes), "fetch.wait.max.ms": "100",
                "queued.max.messages.kbytes": "1048576"}
    consumer = Consumer(client_settings(settings))
    md = consumer.list_topics(topic, timeout=15).topics[topic]
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in md.partitions])
    n = args.records
    seen = 0
    size = 0
    with _progress(args.quiet) as progress:
        task = progress.add_task(f"consume ← {bootstrap}", total=n)
        started = time.perf_counter()
        deadline = started + args.timeout
        while seen < n and time.perf_counter() < deadline:
            for msg in consumer.consume(10000, 1.0):
                if msg.error():
                    continue
                seen += 1
                size += len(msg.value())
            progress.update(task, completed=seen)
        elapsed = time.perf_counter() - started
    consumer.close()
    if seen < n:
        fail(f"only {seen} of {n} records arrived from {bootstrap} within {args.timeout}s "
             "(produce them first with `dm bench produce`)")
    return BenchResult("consume", bootstrap, seen, size // max(seen, 1), elapsed, seen / elapsed,
                       size / elapsed / 1e6, {}, {k: v for k, v in settings.items() if k != "bootstrap.servers"})


def run(args: argparse.Namespace) -> None:
    targets = [args.bootstrap] + ([args.compare] if args.compare else [])
    topic = args.topic or f"bench-{args.record_size}"
    results = []
    for bootstrap in targets:
        ensure_topic(bootstrap, topic, args.partitions)
        result = produce(bootstrap, topic, args) if args.kind == "produce" else consume(bootstrap, topic, args)
        print(result.line(), flush=True)
        results.append(result)
    if len(results) == 2:
        a, b = results
        print(f"ratio {a.bootstrap} / {b.bootstrap}: {a.records_per_s / b.records_per_s:.2f}x records/s")
    if args.json:
        with Path(args.json).open("a") as fh:
            for r in results:
                fh.write(json.dumps(asdict(r)) + "\n")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("bench", help="measure produce/consume throughput and latency")
    p.add_argument("kind", choices=["produce", "consume"], help="what to measure")
    p.add_argument("--bootstrap", default=common.get_default("bootstrap"), help="host:port (env DM_BOOTSTRAP)")
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties (security.protocol, ssl.*, sasl.*) for a secured listener")
    p.add_argument("--compare", metavar="HOST:PORT", help="run the same workload against a second broker")
    p.add_argument("--topic", help="default bench-<record size>")
    p.add_argument("--partitions", type=int, default=1, help="partitions of the benchmark topic")
    p.add_argument("--records", type=int, default=1_000_000, help="records to produce or consume")
    p.add_argument("--record-size", type=int, default=1024, help="value size in bytes")
    p.add_argument("--acks", default="1", choices=["0", "1", "all"], help="producer acks")
    p.add_argument("--linger-ms", type=int, default=5, help="producer linger.ms")
    p.add_argument("--batch-size", type=int, default=1_000_000, help="producer batch.size in bytes")
    p.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                   help="producer compression.type")
    p.add_argument("--idempotence", action="store_true", help="idempotent producer")
    p.add_argument("--latency-sample", type=int, default=16, help="measure latency on one record in N")
    p.add_argument("--warm-up", action="store_true",
                   help="produce one unmeasured record per partition first (the topic gets those records too)")
    p.add_argument("--rate", type=float, default=0, help="offered load in records/s (0: as fast as possible)")
    p.add_argument("--fetch-max-bytes", type=int, default=50 * 1024 * 1024, help="consumer fetch.max.bytes")
    p.add_argument("--timeout", type=float, default=600, help="give up after this many seconds")
    p.add_argument("--json", help="append results as JSON lines to this file")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)
