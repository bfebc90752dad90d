"""What a cluster costs as its partition count grows (issue 31).

    .venv/bin/python -m bench.scale [--partitions 300,1500,3000] [--idle-seconds 20] [--produce-seconds 15]
                                    [--per-topic 100]
                                    [--label current] [--plot] [--plot-only LABEL,LABEL]

For each count: a local cluster (a controller and 3 brokers as processes, default settings), topics of
100 partitions (`--per-topic`) at RF 3 created until the count is reached (so every broker hosts every partition), and:
- file system: milliseconds a new log's files (a directory and three files) took just before the run,
  measured in the temp dir (file_creation_ms: this VM's ext4 moves between 0.05 and 3.5 ms);
- create + leaders: from the first CreateTopics to every partition having a leader in the controller;
  hosted on brokers: until the brokers host every replica (dm_partitions: logs created, replicas
  running), the point from which idle CPU is measured;
- shutdown: SIGTERM to the three brokers at once until the last has exited (every log flushed);
- idle CPU per broker: utime + stime over `--idle-seconds` with no client, as % of one core (mean of the
  three brokers), after 10 s of settling; RSS per broker (mean);
- full Metadata: a Metadata request for all topics on one connection, median of 7 (wall time until the
  whole response frame is read, not decoded: what the broker costs a client);
- event-loop stalls: each broker's dm_event_loop_lag_seconds (a 50 ms timer's lateness) read from
  /metrics around creation (+10 s), the idle period and the produce run: probes late by over 100 ms, the
  bound the longest stayed under, and their causes (dm_event_loop_stalls_total: busy = the loop's own
  work, run_queue = waiting for a CPU, other_thread = another thread of the broker on the CPU, blocked =
  a blocking call);
- produce over all partitions (bench.mock_ceiling measures the same producer against librdkafka's mock
  cluster): confluent-kafka, idempotent, acks=all, linger.ms 5, 100-byte records
  sent round-robin over every partition for `--produce-seconds`: acknowledged records per second.
Results are appended to bench/results/scale.jsonl; --plot draws docs/bench/scale.png with a line per
label (each partition count's latest figures of that label).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .brokers import cpu_seconds, rss_mb
from .replication import LocalCluster

RESULTS = Path(__file__).parent / "results"
OUT = Path(__file__).parent.parent / "docs" / "bench"
PER_TOPIC = 100


def all_led(cluster: LocalCluster, expected: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.cport}/v1/metadata?version=-1", timeout=30) as r:
        topics = json.loads(r.read())["topics"]
    led = sum(1 for name, t in topics.items() if name.startswith("scale-") for p in t["partitions"]
              if p["leader"] >= 0)
    return led >= expected


def hosted(cluster: LocalCluster) -> int:
    """Partition replicas the brokers host (dm_partitions summed): logs created, replicas running."""
    return int(sum(sample.value for port in cluster.http_ports for sample in scraped(port, "dm_partitions")))


def wait_hosted(cluster: LocalCluster, replicas: int, started: float) -> float:
    while hosted(cluster) < replicas:
        time.sleep(0.2)
    return time.monotonic() - started


def shutdown_s(cluster: LocalCluster) -> float:
    """SIGTERM to every broker at once (as a cluster-wide stop does) until the last has exited."""
    started = time.monotonic()
    for proc in cluster.procs.values():
        proc.terminate()
    for proc in cluster.procs.values():
        proc.wait(300)
    return time.monotonic() - started


def create_all(cluster: LocalCluster, partitions: int, per_topic: int = PER_TOPIC) -> float:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 120000})
    topics = [NewTopic(f"scale-{i:04d}", per_topic, 3) for i in range(partitions // per_topic)]
    started = time.monotonic()
    for future in admin.create_topics(topics, request_timeout=300).values():
        future.result(600)
    while not all_led(cluster, partitions):
        time.sleep(0.1)
    return time.monotonic() - started


def file_creation_ms(logs: int = 500) -> float:
    """What this machine's file system charges for a new log right now: milliseconds for a directory and
    three small files (what a broker writes for a new partition, ADR 0033), in the temp dir the brokers
    use. On this benchmark's VM it moved between 0.05 and 3.5 ms within an hour (the ext4 kernel's CPU per
    file creation), so `create + leaders` is read against it."""
    work = tempfile.mkdtemp(prefix="dm-fsprobe-")
    try:
        started = time.perf_counter()
        for i in range(logs):
            directory = os.path.join(work, f"t-{i}")
            os.mkdir(directory)
            for name in ("00000000000000000000.log", "partition.metadata", "leader-epoch-checkpoint"):
                fd = os.open(os.path.join(directory, name), os.O_CREAT | os.O_WRONLY, 0o644)
                os.write(fd, b"0" * 20)
                os.close(fd)
        return (time.perf_counter() - started) / logs * 1000
    finally:
        shutil.rmtree(work, ignore_errors=True)


def idle_cpu(cluster: LocalCluster, seconds: float) -> tuple[float, float]:
    pids = [p.pid for p in cluster.procs.values()]
    before = [cpu_seconds(pid) for pid in pids]
    time.sleep(seconds)
    used = [cpu_seconds(pid) - b for pid, b in zip(pids, before, strict=True)]
    return statistics.mean(used) / seconds * 100, statistics.mean(rss_mb(pid) for pid in pids)


def metadata_ms(port: int) -> float:
    from dm_broker.protocol.access import empty
    from dm_broker.protocol.client import KafkaConnection
    from dm_broker.protocol.codec import request_class

    async def run() -> float:
        conn = await KafkaConnection.open("127.0.0.1", port, "scale-bench", timeout=30)
        try:
            times = []
            for _ in range(7):
                started = time.perf_counter()
                await conn.request_frame(empty(request_class(3, 12), topics=None, allow_auto_topic_creation=False), 60)
                times.append(time.perf_counter() - started)
            return statistics.median(times) * 1000
        finally:
            await conn.close()

    return asyncio.run(run())


def produce_spread(cluster: LocalCluster, partitions: int, seconds: float, per_topic: int = PER_TOPIC) -> float:
    topics = [f"scale-{i:04d}" for i in range(partitions // per_topic)]
    return produce_over({"bootstrap.servers": cluster.bootstrap}, topics, per_topic, seconds)


def produce_over(client: dict, topics: list[str], per_topic: int, seconds: float) -> float:
    """Acknowledged records per second, 100-byte records sent round-robin over every partition of
    `topics` (each of `per_topic` partitions) by one idempotent acks=all producer configured by `client`."""
    from confluent_kafka import Producer

    p = Producer({**client, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  "queue.buffering.max.messages": 1_000_000})
    acked = [0]

    def report(err, _msg) -> None:
        if err is None:
            acked[0] += 1

    deadline = time.monotonic() + seconds
    i = 0
    started = time.monotonic()
    while time.monotonic() < deadline:
        try:
            p.produce(topics[(i // per_topic) % len(topics)], b"x" * 100, partition=i % per_topic, on_delivery=report)
            i += 1
        except BufferError:
            p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    p.flush(120)
    return acked[0] / (time.monotonic() - started)


def scraped_families(port: int, *family_names: str) -> dict[str, list]:
    """The samples of the named metric families from one scrape of a broker's /metrics (a scrape at 10,000
    partitions is work for the broker: one per reading, not one per family)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    found: dict[str, list] = {name: [] for name in family_names}
    for family in text_string_to_metric_families(text):
        if family.name in found:
            found[family.name].extend(family.samples)
    return found


def scraped(port: int, family_name: str) -> list:
    """The samples of one metric family from a broker's /metrics."""
    return scraped_families(port, family_name)[family_name]


@dataclass(frozen=True)
class LoopReading:
    """One broker's event-loop figures at one moment: the lag histogram (dm_event_loop_lag_seconds, how late
    a 50 ms timer fired) as cumulative counts by upper bound (+Inf included), and the probes late by more
    than 100 ms by cause (dm_event_loop_stalls_total: busy, run_queue, other_thread, blocked)."""

    buckets: dict[float, float]
    causes: dict[str, float]


def loop_lag(cluster: LocalCluster, brokers: list[int] | None = None) -> list[LoopReading]:
    """Each broker's (or the listed brokers') event-loop figures."""
    ports = cluster.http_ports if brokers is None else [cluster.http_ports[i] for i in brokers]
    readings = []
    for port in ports:
        found = scraped_families(port, "dm_event_loop_lag_seconds", "dm_event_loop_stalls")
        readings.append(LoopReading(
            {float(sample.labels["le"]): sample.value for sample in found["dm_event_loop_lag_seconds"]
             if sample.name.endswith("_bucket")},
            {sample.labels["cause"]: sample.value for sample in found["dm_event_loop_stalls"]
             if sample.name.endswith("_total")}))
    return readings


def stalls(before: list[LoopReading], after: list[LoopReading]) -> dict:
    """Between two loop_lag readings, over all brokers: probes late by more than 100 ms, the smallest
    histogram bound no probe exceeded (the longest stall is at most that), and the late probes by cause."""
    over_100ms, longest = 0.0, 0.0
    causes: dict[str, int] = {}
    for b, a in zip(before, after, strict=True):
        delta = {le: a.buckets[le] - b.buckets.get(le, 0.0) for le in a.buckets}
        total = delta[float("inf")]
        over_100ms += total - delta[0.1]
        longest = max(longest, min(le for le, n in delta.items() if n >= total))
        for cause, n in a.causes.items():
            causes[cause] = causes.get(cause, 0) + int(n - b.causes.get(cause, 0.0))
    return {"over_100ms": int(over_100ms), "longest_at_most_s": longest, "causes": causes}


def described(s: dict) -> str:
    """A phase's stalls in words: "2 probes > 100 ms (busy 1, run_queue 1), longest <= 0.25 s"."""
    causes = ", ".join(f"{cause} {n}" for cause, n in s["causes"].items() if n)
    return (f"{s['over_100ms']} probes > 100 ms{f' ({causes})' if causes else ''}, "
            f"longest <= {s['longest_at_most_s']:g} s")


def measure(partitions: int, idle_s: float, produce_s: float, per_topic: int = PER_TOPIC) -> dict:
    fs_ms = file_creation_ms()
    with LocalCluster(3, overrides=[], http=True) as cluster:
        lag0 = loop_lag(cluster)
        started = time.monotonic()
        created = create_all(cluster, partitions, per_topic)
        on_brokers = wait_hosted(cluster, partitions * 3, started)
        time.sleep(10)  # the ISRs settle, the first checkpoints are written
        lag1 = loop_lag(cluster)
        cpu, rss = idle_cpu(cluster, idle_s)
        lag2 = loop_lag(cluster)
        meta = metadata_ms(cluster.ports[0])
        lag3 = loop_lag(cluster)
        rate = produce_spread(cluster, partitions, produce_s, per_topic)
        lag4 = loop_lag(cluster)
        stopped = shutdown_s(cluster)
    loop = {"create": stalls(lag0, lag1), "idle": stalls(lag1, lag2), "produce": stalls(lag3, lag4)}
    row = {"partitions": partitions, "per_topic": per_topic, "create_and_lead_s": created,
           "hosted_on_brokers_s": on_brokers, "shutdown_s": stopped,
           "idle_cpu_pct_per_broker": cpu, "rss_mb_per_broker": rss, "full_metadata_ms": meta,
           "produce_spread_rec_s": rate, "loop_stalls": loop, "file_creation_ms_per_log": fs_ms}
    print(f"{partitions:>6} partitions: create + leaders {created:6.1f} s (hosted by the brokers after "
          f"{on_brokers:.1f} s), shutdown {stopped:.1f} s, idle CPU {cpu:5.1f} % per broker, "
          f"RSS {rss:5.0f} MB, full Metadata {meta:6.1f} ms, produce over all {rate:>9,.0f} rec/s; the file system "
          f"took {fs_ms:.2f} ms per new log before the run", flush=True)
    print("        event loop, all brokers: " + "; ".join(f"{phase} {described(s)}" for phase, s in loop.items()),
          flush=True)
    return row


def plot(labels: list[str] | None = None) -> None:
    """One line per label (`labels`, or all): for each partition count, that label's latest figures."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in (RESULTS / "scale.jsonl").read_text().splitlines()]
    merged: dict[str, dict[int, dict]] = {}
    for row in rows:
        for m in row["measurements"]:
            merged.setdefault(row["label"], {})[m["partitions"]] = m
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.6))
    for label in labels or list(merged):
        measurements = [merged[label][n] for n in sorted(merged[label])]
        row = {"measurements": measurements}
        xs = [m["partitions"] for m in row["measurements"]]
        for ax, key, title in zip(axes, ("create_and_lead_s", "idle_cpu_pct_per_broker", "full_metadata_ms",
                                         "produce_spread_rec_s"),
                                  ("create + leaders (s)", "idle CPU per broker (% core)", "full Metadata (ms)",
                                   "produce over all partitions (rec/s)"), strict=True):
            ax.plot(xs, [m[key] for m in row["measurements"]], marker="o", label=label)
            ax.set_title(title)
            ax.set_xlabel("partitions (RF 3, 3 brokers)")
    axes[0].legend()
    fig.tight_layout()
    OUT.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT / "scale.png", dpi=110)
    print(f"wrote {OUT / 'scale.png'}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", default="300,1500,3000")
    parser.add_argument("--idle-seconds", type=float, default=20)
    parser.add_argument("--produce-seconds", type=float, default=15)
    parser.add_argument("--per-topic", type=int, default=PER_TOPIC, help="partitions per topic (bench.mock_ceiling "
                                                                         "compares with 4)")
    parser.add_argument("--label", default="current")
    parser.add_argument("--plot", action="store_true")
    parser.add_argument("--plot-only", metavar="LABELS", help="draw the plot of these labels (comma-separated) "
                                                               "from the results, measuring nothing")
    args = parser.parse_args()
    if args.plot_only:
        plot(args.plot_only.split(","))
        return
    counts = [int(n) for n in args.partitions.split(",")]
    row = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "label": args.label,
           "measurements": [measure(n, args.idle_seconds, args.produce_seconds, args.per_topic)
                                     for n in counts]}
    RESULTS.mkdir(exist_ok=True)
    with (RESULTS / "scale.jsonl").open("a") as f:
        f.write(json.dumps(row) + "\n")
    if args.plot:
        plot()


if __name__ == "__main__":
    main()
