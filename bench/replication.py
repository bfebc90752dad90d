"""Replication benchmarks on a local 3-broker cluster (controller + brokers as processes).

    .venv/bin/python -m bench.replication [--records 300000] [--failovers 5]

1. acks=all throughput and latency, RF=3 (min.insync.replicas=2) against RF=1, 1 KiB records,
   as fast as possible; then both at half of the RF=3 maximum, where latency is meaningful. Each run
   also reports the CPU the brokers spent per record (summed over the three), which says what a
   replica costs apart from how two cores were shared, and the client's (`dm bench`'s process,
   librdkafka's threads included, over its timed part): the client shares the same two cores.
2. Failover: SIGKILL the leader of a partition under acks=all load; time to the next acknowledged
   record on that partition.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .brokers import cpu_per_record, dm_bench, drop_page_cache, free_port, wait_port, warm_memory

RESULTS = Path(__file__).parent / "results"
FAST = ["broker.session.timeout.ms=2000", "broker.heartbeat.interval.ms=200", "replica.lag.time.max.ms=3000"]


def _log_level() -> str:
    return os.environ.get("DM_BENCH_LOG_LEVEL", "WARNING")


def _log_sink(name: str) -> Any:
    """Where a process's log goes: $DM_BENCH_LOGS/<name>.log (appended) when that variable names a
    directory, otherwise nowhere (a benchmark's figures should not include writing logs); the level is
    $DM_BENCH_LOG_LEVEL (WARNING)."""
    directory = os.environ.get("DM_BENCH_LOGS")
    if not directory:
        return subprocess.DEVNULL
    Path(directory).mkdir(parents=True, exist_ok=True)
    return open(Path(directory) / f"{name}.log", "ab")  # the child process keeps it


class LocalCluster:
    """A controller and brokers as processes; `overrides` are broker/controller properties (the
    replication benchmark's fast failure detection by default)."""

    def __init__(self, brokers: int = 3, base: str | None = None, overrides: list[str] | None = None,
                 http: bool = False) -> None:
        self.overrides = FAST if overrides is None else overrides
        self.http_ports = [free_port() for _ in range(brokers)] if http else []  # /metrics of each broker
        self.dir = Path(tempfile.mkdtemp(prefix="dm-rbench-", dir=base))
        self.cport = free_port()
        self.ports = [free_port() for _ in range(brokers)]
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.controller: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def start_broker(self, i: int) -> None:
        cmd = [sys.executable, "-m", "dm_broker.cli", "--log-level", _log_level(), "broker", "--node-id", str(i),
               "--data-dir", str(self.dir / f"b{i}"), "--port", str(self.ports[i]),
               "--http-port", str(self.http_ports[i] if self.http_ports else -1),
               "--controller", f"http://127.0.0.1:{self.cport}"]
        for o in self.overrides:
            cmd += ["--override", o]
        self.procs[i] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=_log_sink(f"broker-{i}"))
        wait_port(self.ports[i])

    def __enter__(self) -> LocalCluster:
        cmd = [sys.executable, "-m", "dm_broker.cli", "--log-level", _log_level(), "controller", "--data-dir",
               str(self.dir / "controller"), "--port", str(self.cport)]
        for o in self.overrides:
            cmd += ["--override", o]
        self.controller = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=_log_sink("controller"))
        try:
            wait_port(self.cport)
            for i in range(len(self.ports)):
                self.start_broker(i)
        except BaseException:
            self.__exit__()  # what started must not outlive a failed start (it did once, holding ports)
            raise
        time.sleep(1)
        return self

    def leader(self, topic: str, partition: int) -> int:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.cport}/v1/metadata?version=-1") as r:
            return json.loads(r.read())["topics"][topic]["partitions"][partition]["leader"]

    def __exit__(self, *exc: object) -> None:
        for p in self.procs.values():
            p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        if self.controller:
            self.controller.terminate()
            try:
                self.controller.wait(20)
            except subprocess.TimeoutExpired:
                self.controller.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def create(bootstrap: str, topic: str, partitions: int, rf: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"min.insync.replicas": "2"} if rf == 3 else {}
    admin.create_topics([NewTopic(topic, partitions, rf, config=config)])[topic].result(15)


def bench(bootstrap: str, topic: str, records: int, rate: float = 0, linger_ms: int = 5, warm_gb: float = 0,
          drop_caches: bool = False) -> dict:
    if drop_caches and not drop_page_cache():
        raise SystemExit("--drop-caches needs root (it writes /proc/sys/vm/drop_caches)")
    warm_memory(warm_gb)
    flags = ["--topic", topic, "--records", str(records), "--record-size", "1024", "--acks", "all",
             "--latency-sample", "4", "--linger-ms", str(linger_ms), "--warm-up"]
    return dm_bench("produce", bootstrap, *flags, *(["--rate", str(rate)] if rate else []))


def failover_times(cluster: LocalCluster, rounds: int) -> list[float]:
    """bench.failover's measurement (leader of partition 0 SIGKILLed under acks=all load) on this cluster,
    with its fast failure detection."""
    from .failover import measure  # bench.failover builds on this module's cluster

    return measure(cluster, rounds, signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--failovers", type=int, default=5)
    parser.add_argument("--data-dir", help="where the brokers keep their logs (default: the system temp dir); "
                        "e.g. /dev/shm to take the shared disk out of the measurement")
    parser.add_argument("--skip-failover", action="store_true")
    parser.add_argument("--warm-memory", type=float, default=0, metavar="GB",
                        help="touch this much memory before each run, so that page-cache pages are not first-touch "
                        "host faults on a VM with free page reporting (see docs/benchmarks.md)")
    parser.add_argument("--drop-caches", action="store_true",
                        help="sync and drop the page cache before each run (root), so no run reclaims what an earlier "
                        "one left cached (see docs/benchmarks.md)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each measurement; the median is reported")
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    with LocalCluster(base=args.data_dir) as cluster:
        create(cluster.bootstrap, "rf1", 3, 1)
        create(cluster.bootstrap, "rf3", 3, 3)
        def median_run(topic: str, records: int, **kw: float) -> dict:
            """The run with the median throughput; paced runs (same throughput) report the median
            of each latency percentile instead. Every run's figures are kept."""
            pids = [proc.pid for proc in cluster.procs.values()]
            runs = [cpu_per_record(pids, records, lambda: bench(cluster.bootstrap, topic, records,
                                                                  warm_gb=args.warm_memory,
                                                                  drop_caches=args.drop_caches, **kw))
                    for _ in range(args.repeat)]
            by_rate = sorted(runs, key=lambda r: r["records_per_s"])
            row = by_rate[len(runs) // 2] | {"runs_records_per_s": [round(r["records_per_s"]) for r in runs],
                                             "runs_p99_ms": [r["latency_ms"]["p99"] for r in runs],
                                             "runs_broker_cpu_us_per_record": [r["broker_cpu_us_per_record"]
                                                                               for r in runs],
                                             "runs_client_cpu_us_per_record": [r["client_cpu_us_per_record"]
                                                                               for r in runs]}
            if "rate" in kw:
                row["latency_ms"] = {q: statistics.median(r["latency_ms"][q] for r in runs) for q in ("p50", "p99")}
            return row

        rf1 = median_run("rf1", args.records)
        rf3 = median_run("rf3", args.records)
        half = rf3["records_per_s"] / 2
        rf1_half = median_run("rf1", args.records // 2, rate=half, linger_ms=1)
        rf3_half = median_run("rf3", args.records // 2, rate=half, linger_ms=1)
        fo = [] if args.skip_failover else failover_times(cluster, args.failovers)
    row = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "data_dir": args.data_dir or tempfile.gettempdir(),
           "warm_memory_gb": args.warm_memory, "drop_caches": args.drop_caches, "repeat": args.repeat,
           "rf1": rf1, "rf3": rf3, "rf1_half": rf1_half, "rf3_half": rf3_half, "failover_s": fo}
    with (RESULTS / "replication.jsonl").open("a") as fh:
        fh.write(json.dumps(row) + "\n")
    for name, r in (("RF=1 max", rf1), ("RF=3 max", rf3), ("RF=1 at half", rf1_half), ("RF=3 at half", rf3_half)):
        lat = r["latency_ms"]
        print(f"{name:14s} {r['records_per_s']:>10,.0f} rec/s {r['mb_per_s']:>7.1f} MB/s  p50 {lat['p50']:.2f} ms  "
              f"p99 {lat['p99']:.2f} ms  runs {r['runs_records_per_s']}  p99s {[round(x, 1) for x in r['runs_p99_ms']]}"
              f"  broker CPU µs/record {r['runs_broker_cpu_us_per_record']}"
              f"  client CPU µs/record {r['runs_client_cpu_us_per_record']}")
    print(f"RF=3/RF=1 throughput: {rf3['records_per_s'] / rf1['records_per_s']:.2f}")
    if fo:
        print(f"failover after leader SIGKILL: median {statistics.median(fo):.2f} s, runs {[round(x, 2) for x in fo]}")


if __name__ == "__main__":
    main()
