"""What an idle Kafka connection costs a broker (issue 31).

    .venv/bin/python -m bench.connections [--connections 1000,5000] [--label current]

One broker (default settings, no topics). For each count: that many connections are opened, each
sends one ApiVersions request and reads the answer (so the broker has a session, a reader task and
its buffers for it), then stay idle; the broker's RSS is read before and after, 3 s after the last
answer. Printed: KB of broker RSS per idle connection, and the broker's CPU while they idle.
Results are appended to bench/results/connections.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import time
from pathlib import Path

from .brokers import cpu_seconds, dm_broker, rss_mb

RESULTS = Path(__file__).parent / "results"
API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 1, 0)  # size, api key, version, correlation id, null client id


async def open_idle(host: str, port: int, count: int) -> list[asyncio.StreamWriter]:
    writers = []
    for start in range(0, count, 200):
        batch = range(start, min(count, start + 200))
        pairs = await asyncio.gather(*(asyncio.open_connection(host, port) for _ in batch))
        for _, writer in pairs:
            writer.write(API_VERSIONS_V0)
        for reader, writer in pairs:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            await reader.readexactly(size)
            writers.append(writer)
    return writers


async def measure(bootstrap: str, pid: int, count: int) -> dict[str, float]:
    host, port = bootstrap.split(":")
    await asyncio.sleep(2)
    before = rss_mb(pid)
    writers = await open_idle(host, int(port), count)
    await asyncio.sleep(3)
    after = rss_mb(pid)
    cpu_before = cpu_seconds(pid)
    await asyncio.sleep(10)
    idle_cpu = (cpu_seconds(pid) - cpu_before) / 10 * 100
    for writer in writers:
        writer.close()
    return {"connections": count, "rss_before_mb": before, "rss_after_mb": after,
            "kb_per_connection": (after - before) * 1024 / count, "idle_cpu_pct": idle_cpu}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", default="1000,5000")
    parser.add_argument("--label", default="current")
    args = parser.parse_args()
    rows = []
    for count in (int(c) for c in args.connections.split(",")):
        # every connection comes from 127.0.0.1: no per-address limit here (what one connection costs is measured)
        with dm_broker(f"max.connections.per.ip={2**31 - 1}") as (bootstrap, proc):
            row = asyncio.run(measure(bootstrap, proc.pid, count))
        rows.append(row)
        print(f"{count:6d} idle connections: {row['kb_per_connection']:5.1f} KB each "
              f"(RSS {row['rss_before_mb']:.0f} -> {row['rss_after_mb']:.0f} MB), idle CPU {row['idle_cpu_pct']:.1f} %")
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / "connections.jsonl", "a") as out:
        out.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "label": args.label,
                              "measurements": rows}) + "\n")


if __name__ == "__main__":
    main()
