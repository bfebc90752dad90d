"""Spark connector benchmarks: format("dm") on local[2] against one dm broker.

    .venv/bin/python -m bench.spark [--records 1000000] [--record-size 100] [--partitions 4] [--repeat 3]

1. Read: a topic of N records (filled with `dm bench produce`) into Spark's `noop` sink;
   rows/s over the whole query (planning, fetches, Arrow decoding, JVM transfer). The same rows
   (every column the connector gives) are written to Parquet once and read the same way: the
   baseline issue 31 compares with (a batch read of a topic against a read of local files).
   Each read also reports the CPU seconds it took in the JVM, in Spark's Python workers (the
   connector's side) and in the broker: on local[2] the two cores bound a read to at least half
   their sum.
2. Write: spark.range(N) as string values into a topic through the connector (idempotent
   producer, acks=all); rows/s until every record is acknowledged.

Results are appended to bench/results/spark.jsonl; `--plot` draws docs/bench/spark.png.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

from .brokers import dm_bench, dm_broker, process_stat

RESULTS = Path(__file__).parent / "results"


def session():  # type: ignore[no-untyped-def]
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master("local[2]").appName("dm-bench")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def timed(action) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def cpu_by_process(jvm: int, broker: int) -> dict[str, float]:
    """CPU seconds so far of the Spark JVM, of the Python workers it started (every live process under it,
    with the workers they have reaped), and of the broker."""
    parents: dict[int, int] = {}
    spent: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):  # a worker that exits meanwhile is counted by its parent
                stat = process_stat(int(entry))
                parents[int(entry)], spent[int(entry)] = stat.parent, stat.cpu_s + stat.reaped_cpu_s

    def under_jvm(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == jvm:
                return True
        return False

    return {"jvm": spent.get(jvm, 0.0), "python_workers": sum(c for pid, c in spent.items() if under_jvm(pid)),
            "broker": spent.get(broker, 0.0)}


def cpu_timed(action, jvm: int, broker: int) -> tuple[float, dict[str, float]]:  # type: ignore[no-untyped-def]
    """timed(action) and the CPU seconds it cost each kind of process (cpu_by_process)."""
    before = cpu_by_process(jvm, broker)
    seconds = timed(action)
    after = cpu_by_process(jvm, broker)
    return seconds, {kind: round(after[kind] - before[kind], 3) for kind in after}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--plot", action="store_true")
    args = parser.parse_args()
    spark = session()
    results = []
    jvm = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]  # the JVM py4j started
    with dm_broker() as (bootstrap, broker):
        dm_bench("produce", bootstrap, "--topic", "spark-read", "--partitions", str(args.partitions),
                 "--records", str(args.records), "--record-size", str(args.record_size), "--acks", "1")

        def read() -> None:
            (spark.read.format("dm").option("kafka.bootstrap.servers", bootstrap).option("subscribe", "spark-read")
             .load().write.format("noop").mode("overwrite").save())

        read()  # warm-up: JVM JIT, Python workers
        count = spark.read.format("dm").option("kafka.bootstrap.servers", bootstrap) \
            .option("subscribe", "spark-read").load().count()
        assert count == args.records, f"read {count} of {args.records} records"
        read_runs = [cpu_timed(read, jvm, broker.pid) for _ in range(args.repeat)]
        reads = [seconds for seconds, _ in read_runs]

        import tempfile

        with tempfile.TemporaryDirectory(prefix="dm-spark-parquet-") as parquet:
            spark.read.format("dm").option("kafka.bootstrap.servers", bootstrap).option("subscribe", "spark-read") \
                .load().write.mode("overwrite").parquet(parquet)

            def read_parquet() -> None:
                spark.read.parquet(parquet).write.format("noop").mode("overwrite").save()

            read_parquet()  # warm-up
            parquet_runs = [cpu_timed(read_parquet, jvm, broker.pid) for _ in range(args.repeat)]
            parquet_reads = [seconds for seconds, _ in parquet_runs]

        from pyspark.sql import functions as F

        source = spark.range(args.records, numPartitions=2).select(
            F.lpad(F.col("id").cast("string"), args.record_size, "x").alias("value"))

        def write() -> None:
            topic = f"spark-write-{time.monotonic_ns()}"
            source.write.format("dm").option("kafka.bootstrap.servers", bootstrap).option("topic", topic) \
                .mode("append").save()

        writes = [timed(write) for _ in range(args.repeat)]
    cpu = {"read": [c for _, c in read_runs], "parquet-read": [c for _, c in parquet_runs]}
    for kind, times in (("read", reads), ("parquet-read", parquet_reads), ("write", writes)):
        median = statistics.median(times)
        result = {"benchmark": f"spark-{kind}", "records": args.records, "record_size": args.record_size,
                  "partitions": args.partitions, "master": "local[2]", "seconds": [round(t, 3) for t in times],
                  "rows_per_s": round(args.records / median), "mb_per_s": round(
                      args.records * args.record_size / median / 1e6, 1)}
        if kind in cpu:
            result["cpu_seconds"] = cpu[kind]
        results.append(result)
        print(f"{kind:>12}: {result['rows_per_s']:>10,} rows/s  {result['mb_per_s']:>7} MB/s  "
              f"(median of {times})")
        if kind in cpu:
            print(f"{'':>12}  CPU seconds per read: {cpu[kind]}")
    print(f"read / Parquet read: {statistics.median(parquet_reads) / statistics.median(reads):.2f}")
    RESULTS.mkdir(exist_ok=True)
    with (RESULTS / "spark.jsonl").open("a") as out:
        for result in results:
            out.write(json.dumps({**result, "at": time.strftime("%Y-%m-%dT%H:%M:%S")}) + "\n")
    if args.plot:
        plot(results)
    spark.stop()


def plot(results: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar([r["benchmark"] for r in results], [r["rows_per_s"] / 1e6 for r in results],
           color=["#4c72b0", "#8c8c8c", "#dd8452"][: len(results)])
    ax.axhline(1.0, linestyle="--", color="grey", label="read target 1 M rows/s")
    ax.set_ylabel("million rows/s")
    ax.set_title(f"format(\"dm\") on local[2], {results[0]['record_size']} B records")
    ax.legend()
    out = Path(__file__).parents[1] / "docs" / "bench" / "spark.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"plot: {out}")


if __name__ == "__main__":
    main()
