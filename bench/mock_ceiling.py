"""The client's own ceiling for issue 31's spread-produce goal: the same producer as bench.scale against
librdkafka's built-in mock cluster (`test.mock.num.brokers`, in the producer's process, no disk and no
replication), over the same number of partitions.

    .venv/bin/python -m bench.mock_ceiling [--partitions 300,3000] [--produce-seconds 15]

The mock cluster cannot create topics through the admin API; it auto-creates each topic the producer
asks metadata for, with 4 partitions. So its partitions are spread over `partitions / 4` topics, while
bench.scale's are 100 per topic; `--per-topic 4` in bench.scale gives dm the same layout. Results are
appended to bench/results/mock_ceiling.jsonl.
"""

from __future__ import annotations

import argparse
import json
import time

from .scale import RESULTS, produce_over

MOCK_PARTITIONS_PER_TOPIC = 4


def mock_rate(partitions: int, seconds: float) -> float:
    client = {"test.mock.num.brokers": 3, "bootstrap.servers": "mock:9092", "log_level": 3}
    topics = [f"mock-{i:04d}" for i in range(partitions // MOCK_PARTITIONS_PER_TOPIC)]
    return produce_over(client, topics, MOCK_PARTITIONS_PER_TOPIC, seconds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", default="300,3000")
    parser.add_argument("--produce-seconds", type=float, default=15)
    args = parser.parse_args()
    rows = []
    for n in (int(x) for x in args.partitions.split(",")):
        rate = mock_rate(n, args.produce_seconds)
        rows.append({"partitions": n, "per_topic": MOCK_PARTITIONS_PER_TOPIC, "mock_produce_rec_s": rate})
        print(f"{n:>6} partitions ({n // MOCK_PARTITIONS_PER_TOPIC} topics of {MOCK_PARTITIONS_PER_TOPIC}): "
              f"librdkafka mock cluster {rate:>9,.0f} rec/s", flush=True)
    RESULTS.mkdir(exist_ok=True)
    with (RESULTS / "mock_ceiling.jsonl").open("a") as f:
        f.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "measurements": rows}) + "\n")


if __name__ == "__main__":
    main()
