"""Moving partition data between brokers: a local 4-broker cluster (controller and brokers as
processes), one partition filled with --size-gb of records, moved to another broker with
AlterPartitionReassignments (the leader moves with it) -- once unthrottled, once with
--throttle bytes/s. Meanwhile an acks=all producer writes 1 KiB records at a fixed rate to an RF=3
topic; its latency percentiles before and during each move show what the move costs clients.

    .venv/bin/python -m bench.reassign [--size-gb 1] [--throttle 50000000] [--rate 500] [--plot]

Results go to bench/results/reassign.json (and a plot with --plot).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from pathlib import Path

from dm_broker.tools.wire_admin import WireAdmin

from .replication import RESULTS, LocalCluster, create


class LatencyProbe(threading.Thread):
    """acks=all, idempotent, `rate` records/s of 1 KiB; records (send time, latency) per ack."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 0})
        interval = 1 / self.rate
        next_at = time.monotonic()
        while not self.stop.is_set():
            sent = time.monotonic()
            p.produce(self.topic, b"x" * 1024, on_delivery=lambda e, m, sent=sent: self.samples.append(
                (sent, time.monotonic() - sent)) if e is None else None)
            p.poll(0)
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
        p.flush(60)

    def between(self, start: float, end: float) -> dict[str, float]:
        lat = sorted(lat for sent, lat in self.samples if start <= sent <= end)
        if not lat:
            return {"count": 0}
        pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000  # noqa: E731
        return {"count": len(lat), "p50_ms": pick(0.50), "p99_ms": pick(0.99), "max_ms": lat[-1] * 1000}


def fill(bootstrap: str, topic: str, size_gb: float) -> float:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20, "batch.size": 1 << 20,
                  "queue.buffering.max.kbytes": 512 * 1024})
    value = b"v" * 10_000
    count = int(size_gb * (1 << 30) / len(value))
    start = time.monotonic()
    for _ in range(count):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(300)
    return time.monotonic() - start


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.glob("*") if f.is_file())


async def move(bootstrap: str, topic: str, target: int, throttle: int | None) -> float:
    admin = await WireAdmin.connect(bootstrap)
    try:
        await admin.set_throttle(throttle)
        start = time.monotonic()
        result = await admin.alter_reassignments({(topic, 0): [target]})
        assert result[(topic, 0)] is None, result
        while await admin.list_reassignments():
            await asyncio.sleep(0.1)
        took = time.monotonic() - start
        await admin.set_throttle(None)
        return took
    finally:
        await admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-gb", type=float, default=1.0, help="partition data to move")
    parser.add_argument("--throttle", type=int, default=50_000_000, help="bytes/s for the throttled move")
    parser.add_argument("--rate", type=int, default=500, help="records/s of the latency probe")
    parser.add_argument("--plot", action="store_true", help="write a plot next to the results")
    args = parser.parse_args()
    runs = []
    with LocalCluster(brokers=4, overrides=[]) as cluster:
        create(cluster.bootstrap, "bulk", 1, 1)
        create(cluster.bootstrap, "live", 3, 3)
        source = cluster.leader("bulk", 0)
        fill_s = fill(cluster.bootstrap, "bulk", args.size_gb)
        size = dir_bytes(cluster.dir / f"b{source}" / "bulk-0")
        print(f"filled bulk-0 on broker {source}: {size / 1e9:.2f} GB in {fill_s:.1f}s", flush=True)
        probe = LatencyProbe(cluster.bootstrap, "live", args.rate)
        probe.start()
        time.sleep(15)  # the fill's dirty pages written back, the probe's connections warm
        others = [b for b in range(4) if b != source]
        for target, throttle in ((others[0], None), (others[1], args.throttle)):
            before_start = time.monotonic() - 5
            start = time.monotonic()
            took = asyncio.run(move(cluster.bootstrap, "bulk", target, throttle))
            end = time.monotonic()
            moved = dir_bytes(cluster.dir / f"b{target}" / "bulk-0")
            run = {"throttle_bytes_per_s": throttle, "from": source, "to": target, "seconds": took,
                   "bytes": moved, "mb_per_s": moved / took / 1e6, "baseline": probe.between(before_start, start),
                   "during": probe.between(start, end)}
            runs.append(run)
            how = "unthrottled" if throttle is None else f"throttle {throttle / 1e6:.0f} MB/s"
            print(f"move {source}->{target} ({how}): "
                  f"{moved / 1e9:.2f} GB in {took:.1f}s ({run['mb_per_s']:.0f} MB/s); producer p99 "
                  f"{run['baseline'].get('p99_ms', 0):.1f} ms before, {run['during'].get('p99_ms', 0):.1f} ms during",
                  flush=True)
            source = target
            time.sleep(10)
        probe.stop.set()
        probe.join(60)
    result = {"size_gb": args.size_gb, "fill_seconds": fill_s, "probe_rate": args.rate, "runs": runs}
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "reassign.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"-> {out}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        labels = ["unthrottled" if r["throttle_bytes_per_s"] is None else
                  f"{r['throttle_bytes_per_s'] / 1e6:.0f} MB/s" for r in runs]
        ax.bar([f"{label}\nbefore" for label in labels], [r["baseline"].get("p99_ms", 0) for r in runs])
        ax.bar([f"{label}\nduring" for label in labels], [r["during"].get("p99_ms", 0) for r in runs])
        ax.set_ylabel("producer p99 (ms)")
        ax.set_title(f"moving {args.size_gb:g} GB: " + ", ".join(f"{r['seconds']:.0f}s" for r in runs))
        fig.tight_layout()
        fig.savefig(out.with_suffix(".png"))
        print(f"plot -> {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
