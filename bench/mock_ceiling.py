"""The client's own ceiling for issue 31's produce goals: the same producer against librdkafka's built-in
mock cluster (`test.mock.num.brokers`, in the producer's process, no disk and no replication).

    .venv/bin/python -m bench.mock_ceiling [--partitions 300,3000] [--produce-seconds 15]
    .venv/bin/python -m bench.mock_ceiling --single-partition [--records 1000000] [--repeat 3]

Spread (the default): bench.scale's producer over the same number of partitions.
`--single-partition`: 1 KiB records to one partition, acks=1, as `dm bench produce`'s defaults (linger 5
ms, batch.size 1 MB), against one dm broker and against a one-broker mock cluster, alternately, with the
ratio of the medians ("produce 1 KiB on one partition ≥ 0.9x the mock ceiling").

The mock cluster cannot create topics through the admin API; it auto-creates each topic the producer
asks metadata for, with 4 partitions. So its partitions are spread over `partitions / 4` topics, while
bench.scale's are 100 per topic; `--per-topic 4` in bench.scale gives dm the same layout. Results are
appended to bench/results/mock_ceiling.jsonl.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from .scale import RESULTS, produce_over

MOCK_PARTITIONS_PER_TOPIC = 4


def mock_rate(partitions: int, seconds: float) -> float:
    client = {"test.mock.num.brokers": 3, "bootstrap.servers": "mock:9092", "log_level": 3}
    topics = [f"mock-{i:04d}" for i in range(partitions // MOCK_PARTITIONS_PER_TOPIC)]
    return produce_over(client, topics, MOCK_PARTITIONS_PER_TOPIC, seconds)


def one_partition_rate(client: dict, topic: str, records: int) -> float:
    """Acknowledged records per second for `records` 1 KiB records to partition 0 of `topic`."""
    from confluent_kafka import Producer

    producer = Producer({**client, "acks": "1", "linger.ms": 5, "batch.size": 1_000_000,
                         "queue.buffering.max.kbytes": 1_048_576, "queue.buffering.max.messages": 1_000_000,
                         "socket.nagle.disable": True})
    producer.produce(topic, b"w", partition=0)  # metadata and connection before the clock starts
    producer.flush(30)
    value = b"x" * 1024
    acked = [0]

    def report(err, _msg) -> None:
        acked[0] += err is None

    started = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=0, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.005)
    producer.flush(120)
    return acked[0] / (time.perf_counter() - started)


def single_partition(records: int, repeat: int) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic

    from .brokers import dm_broker

    dm_rates, mock_rates = [], []
    with dm_broker() as (bootstrap, _):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("one", 1, 1)])["one"].result(30)
        for _ in range(repeat):
            dm_rates.append(one_partition_rate({"bootstrap.servers": bootstrap}, "one", records))
            mock_rates.append(one_partition_rate({"test.mock.num.brokers": 1, "bootstrap.servers": "mock:9092",
                                                  "log_level": 3}, "one", records))
    row = {"records": records, "record_size": 1024, "dm_rec_s": dm_rates, "mock_rec_s": mock_rates,
           "ratio_of_medians": statistics.median(dm_rates) / statistics.median(mock_rates)}
    print(f"1 KiB to one partition, acks=1, {records:,} records: dm {', '.join(f'{r:,.0f}' for r in dm_rates)} "
          f"rec/s; librdkafka mock {', '.join(f'{r:,.0f}' for r in mock_rates)} rec/s; ratio of the medians "
          f"{row['ratio_of_medians']:.2f}", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", default="300,3000")
    parser.add_argument("--produce-seconds", type=float, default=15)
    parser.add_argument("--single-partition", action="store_true")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.single_partition:
        row = single_partition(args.records, args.repeat)
        RESULTS.mkdir(exist_ok=True)
        with (RESULTS / "mock_ceiling.jsonl").open("a") as f:
            f.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "single_partition": row}) + "\n")
        return
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
