"""Spark connector benchmarks: format("dm") on local[2] against one dm broker.

    .venv/bin/python -m bench.spark [--records 1000000] [--record-size 100] [--partitions 4] [--repeat 3]

1. Read: a topic of N records (filled with `dm bench produce`) into Spark's `noop` sink;
   rows/s over the whole query (planning, fetches, Arrow decoding, JVM transfer). The same rows
   (every column the connector gives) are written to Parquet once and read the same way: the
   baseline issue 31 compares with (a batch read of a topic against a read of local files).
2. Write: spark.range(N) as string values into a topic through the connector (idempotent
   producer, acks=all); rows/s until every record is acknowledged.

Results are appended to bench/results/spark.jsonl; `--plot` draws docs/bench/spark.png.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from .brokers import dm_bench, dm_broker

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
    with dm_broker() as (bootstrap, _proc):
        dm_bench("produce", bootstrap, "--topic", "spark-read", "--partitions", str(args.partitions),
                 "--records", str(args.records), "--record-size", str(args.record_size), "--acks", "1")

        def read() -> None:
            (spark.read.format("dm").option("kafka.bootstrap.servers", bootstrap).option("subscribe", "spark-read")
             .load().write.format("noop").mode("overwrite").save())

        read()  # warm-up: JVM JIT, Python workers
        count = spark.read.format("dm").option("kafka.bootstrap.servers", bootstrap) \
            .option("subscribe", "spark-read").load().count()
        assert count == args.records, f"read {count} of {args.records} records"
        reads = [timed(read) for _ in range(args.repeat)]

        import tempfile

        with tempfile.TemporaryDirectory(prefix="dm-spark-parquet-") as parquet:
            spark.read.format("dm").option("kafka.bootstrap.servers", bootstrap).option("subscribe", "spark-read") \
                .load().write.mode("overwrite").parquet(parquet)

            def read_parquet() -> None:
                spark.read.parquet(parquet).write.format("noop").mode("overwrite").save()

            read_parquet()  # warm-up
            parquet_reads = [timed(read_parquet) for _ in range(args.repeat)]

        from pyspark.sql import functions as F

        source = spark.range(args.records, numPartitions=2).select(
            F.lpad(F.col("id").cast("string"), args.record_size, "x").alias("value"))

        def write() -> None:
            topic = f"spark-write-{time.monotonic_ns()}"
            source.write.format("dm").option("kafka.bootstrap.servers", bootstrap).option("topic", topic) \
                .mode("append").save()

        writes = [timed(write) for _ in range(args.repeat)]
    for kind, times in (("read", reads), ("parquet-read", parquet_reads), ("write", writes)):
        median = statistics.median(times)
        result = {"benchmark": f"spark-{kind}", "records": args.records, "record_size": args.record_size,
                  "partitions": args.partitions, "master": "local[2]", "seconds": [round(t, 3) for t in times],
                  "rows_per_s": round(args.records / median), "mb_per_s": round(
                      args.records * args.record_size / median / 1e6, 1)}
        results.append(result)
        print(f"{kind:>12}: {result['rows_per_s']:>10,} rows/s  {result['mb_per_s']:>7} MB/s  "
              f"(median of {times})")
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
