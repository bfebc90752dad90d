"""`dm produce TOPIC`: one record per stdin line; dm's per-topic partitioner picks partitions."""

from __future__ import annotations

import argparse
import sys

from ..partitioners import Partitioner
from .client import admin, fail, produce_waiting, settings, wait


def topic_partitioner(bootstrap: str, topic: str, client_config: dict[str, str] | None = None) -> Partitioner:
    """The topic's own partitioner settings and partition count; LookupError if there is no such topic.
    `client_config`: librdkafka settings to connect with (the CLI's --command-config otherwise)."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import ConfigResource

    from ..security.client_config import security_only

    connection = settings({}) if client_config is None else security_only(client_config)
    client = admin(bootstrap, auto_create=True, connection=connection)
    md = client.list_topics(topic=topic, timeout=15).topics.get(topic)
    if md is None or md.error is not None:
        raise LookupError(f"topic {topic}: {md.error.str() if md else 'not found'} (the brokers do not create "
                          "topics on first use when auto.create.topics.enable is false)")
    resource = ConfigResource("topic", topic)
    configs = wait(client.describe_configs([resource]))[resource]
    keyed, keyless = "murmur3", "round_robin"
    if not isinstance(configs, Exception):
        keyed = configs.get("partitioner").value if "partitioner" in configs else keyed
        keyless = configs.get("keyless.partitioner").value if "keyless.partitioner" in configs else keyless
    n = len(md.partitions)
    sizes = None
    if keyless == "least_loaded" or keyed == "least_loaded":
        consumer = Consumer({**connection, "bootstrap.servers": bootstrap, "group.id": "dm-cli-sizes"})
        try:
            sizes = []
            for p in range(n):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                sizes.append(high - low)
        finally:
            consumer.close()
    return Partitioner(keyed, keyless, n, sizes)


def run(args: argparse.Namespace) -> None:
    from confluent_kafka import Producer

    try:
        partitioner = None if args.partition is not None else topic_partitioner(args.bootstrap, args.topic)
    except LookupError as exc:
        fail(str(exc))
    producer = Producer(settings({"bootstrap.servers": args.bootstrap, "acks": args.acks,
                                  "enable.idempotence": True, "linger.ms": 5, "compression.type": args.compression}))
    errors: list[str] = []

    def report(err, msg) -> None:
        if err is not None:
            errors.append(str(err))

    count = 0
    for line in sys.stdin.buffer:
        value = line.rstrip(b"\n")
        key = args.key.encode() if args.key is not None else None
        if args.key_separator and args.key_separator.encode() in value:
            raw_key, _, value = value.partition(args.key_separator.encode())
            key = raw_key
        partition = args.partition if args.partition is not None else partitioner.choose(key)
        kwargs = {"partition": partition}
        if key is not None:
            kwargs["key"] = key
        produce_waiting(producer, args.topic, value, on_delivery=report, **kwargs)
        producer.poll(0)
        count += 1
    remaining = producer.flush(60)
    if errors or remaining:
        fail(f"{len(errors) + remaining} of {count} records were not acknowledged: {errors[:3]}")
    print(f"produced {count} records to {args.topic}", file=sys.stderr)


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("produce", parents=[common], help="produce stdin lines as records")
    p.add_argument("topic", help="topic to write to")
    p.add_argument("--key", help="key for every record")
    p.add_argument("--key-separator", help="split each line into key and value at this separator")
    p.add_argument("--partition", type=int, help="write to this partition instead of the partitioner's choice")
    p.add_argument("--acks", default="all", choices=["0", "1", "all"], help="producer acks")
    p.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                   help="producer compression.type")
    p.set_defaults(func=run)
