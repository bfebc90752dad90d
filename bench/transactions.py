"""Transactional produce against idempotent produce.

    .venv/bin/python -m bench.transactions [--brokers 3] [--records 200000] [--record-size 1024]
                                           [--warm-memory 6] [--plot]

One confluent-kafka producer (acks=all, linger.ms=5, lz4 off) writes `--records` records to a
6-partition topic (RF = --brokers, min.insync.replicas = 2 with 3 brokers):
1. idempotent, no transaction, flushed every 10,000 records (the 10,000-record transactions'
   sending pattern): records/s;
2. transactional, transactions of 100 records; 3. of 10,000 records: records/s, and the latency
   of commit_transaction() (p50/p99) measured after a flush(), so it is the commit alone —
   EndTxn, the Prepare/Complete writes to __transaction_state and the markers — not the
   sending of the records (send_p50_ms: begin_transaction() to the end of flush(), the records'
   transaction registration, KIP-890 verification and acks=all replication).
`--warm-memory GB` touches that much memory before each scenario (see bench.brokers.warm_memory:
on this VM fresh page-cache pages are host page faults, which would penalise whichever scenario
runs first). Results are appended to bench/results/transactions.jsonl; --plot draws
docs/bench/transactions.png.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

from .brokers import dm_broker, warm_memory

RESULTS = Path(__file__).parent / "results"
OUT = Path(__file__).parent.parent / "docs" / "bench"
PARTITIONS = 6


@contextlib.contextmanager
def cluster(brokers: int) -> Iterator[str]:
    if brokers == 1:
        with dm_broker() as (bootstrap, _proc):
            yield bootstrap
        return
    from .replication import LocalCluster

    with LocalCluster(brokers) as c:
        yield c.bootstrap


def producer(bootstrap: str, transactional_id: str | None):
    from confluent_kafka import Producer

    config = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
              "queue.buffering.max.messages": 500_000}
    if transactional_id:
        config["transactional.id"] = transactional_id
    return Producer(config)


def send(p, topic: str, payload: bytes, count: int, errors: list) -> None:
    def report(err, _msg) -> None:
        if err is not None:
            errors.append(err)

    for _ in range(count):
        while True:
            try:
                p.produce(topic, payload, on_delivery=report)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)


def idempotent(bootstrap: str, topic: str, records: int, size: int, chunk: int = 10_000) -> dict:
    """The same sending pattern as transactions of `chunk` records (a flush after each), without them."""
    p = producer(bootstrap, None)
    errors: list = []
    started = time.perf_counter()
    for _ in range(max(1, records // chunk)):
        send(p, topic, b"x" * size, chunk, errors)
        left = p.flush(120)
        assert not left
    elapsed = time.perf_counter() - started
    assert not errors, errors[:3]
    return {"records_per_s": records / elapsed, "mb_per_s": records * size / elapsed / 1e6}


def transactional(bootstrap: str, topic: str, records: int, size: int, per_txn: int) -> dict:
    p = producer(bootstrap, f"bench-{per_txn}-{time.time_ns()}")
    p.init_transactions(30)
    errors: list = []
    commits: list[float] = []
    sends: list[float] = []
    payload = b"x" * size
    started = time.perf_counter()
    for _ in range(max(1, records // per_txn)):
        t0 = time.perf_counter()
        p.begin_transaction()
        send(p, topic, payload, per_txn, errors)
        p.flush(120)
        t1 = time.perf_counter()
        p.commit_transaction(60)
        commits.append((time.perf_counter() - t1) * 1000)
        sends.append((t1 - t0) * 1000)
    elapsed = time.perf_counter() - started
    assert not errors, errors[:3]
    total = per_txn * len(commits)
    ordered = sorted(commits)
    return {"records_per_s": total / elapsed, "mb_per_s": total * size / elapsed / 1e6, "transactions": len(commits),
            "send_p50_ms": statistics.median(sends), "commit_p50_ms": statistics.median(ordered),
            "commit_p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]}


def plot(row: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(row["scenarios"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.bar(names, [row["scenarios"][n]["records_per_s"] for n in names])
    left.set_ylabel("records/s")
    left.set_title(f"{row['record_size']} B records, {row['brokers']} broker(s)")
    txns = [n for n in names if "commit_p50_ms" in row["scenarios"][n]]
    x = range(len(txns))
    right.bar([i - 0.2 for i in x], [row["scenarios"][n]["commit_p50_ms"] for n in txns], width=0.4, label="p50")
    right.bar([i + 0.2 for i in x], [row["scenarios"][n]["commit_p99_ms"] for n in txns], width=0.4, label="p99")
    right.set_xticks(list(x), txns)
    right.set_ylabel("commit_transaction() ms")
    right.legend()
    fig.tight_layout()
    OUT.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT / "transactions.png", dpi=110)
    print(f"wrote {OUT / 'transactions.png'}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--brokers", type=int, default=3, choices=(1, 3))
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--warm-memory", type=float, default=6.0)
    parser.add_argument("--plot", action="store_true")
    args = parser.parse_args()
    scenarios: dict[str, dict] = {}
    from .replication import create

    with cluster(args.brokers) as bootstrap:
        replicas = min(3, args.brokers)
        for name in ("idempotent", "txn of 100", "txn of 10000"):
            topic = name.replace(" ", "-")
            create(bootstrap, topic, PARTITIONS, replicas)
            warm_memory(args.warm_memory)
            if name == "idempotent":
                scenarios[name] = idempotent(bootstrap, topic, args.records, args.record_size)
            else:
                scenarios[name] = transactional(bootstrap, topic, args.records, args.record_size,
                                                int(name.rsplit(" ", 1)[1]))
            print(f"{name:>14}: " + ", ".join(f"{k} {v:,.1f}" for k, v in scenarios[name].items()), flush=True)
    row = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "brokers": args.brokers, "records": args.records,
           "warm_memory_gb": args.warm_memory,
           "record_size": args.record_size, "scenarios": scenarios}
    RESULTS.mkdir(exist_ok=True)
    with (RESULTS / "transactions.jsonl").open("a") as f:
        f.write(json.dumps(row) + "\n")
    if args.plot:
        plot(row)


if __name__ == "__main__":
    main()
