"""`dm topics create|list|describe|delete`."""

from __future__ import annotations

import argparse
import time

from rich.table import Table

from .client import admin, console, fail, wait
from .reassign import register_topic_commands

VISIBLE_WITHIN_S = 15.0  # how long a created topic may take to show in the metadata a broker answers


def parse_configs(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            fail(f"--config expects key=value, got {item!r}")
        out[key] = value
    return out


def at_least_one(text: str) -> int:
    """argparse type: Kafka reads -1 as "the broker's default"; the CLI asks for a number."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def create(args: argparse.Namespace) -> None:
    from confluent_kafka.admin import NewTopic

    topic = NewTopic(args.name, num_partitions=args.partitions, replication_factor=args.replication_factor,
                     config=parse_configs(args.config))
    client = admin(args.bootstrap)  # keep the handle alive until the futures resolve
    result = wait(client.create_topics([topic], operation_timeout=30))[args.name]
    if isinstance(result, Exception):
        fail(f"cannot create topic {args.name}: {result}")
    # Say what exists now, as the brokers report it. The broker asked may not have applied the
    # controller's update yet (it answers UNKNOWN_TOPIC_OR_PART for a moment): ask again for a while.
    deadline = time.monotonic() + VISIBLE_WITHIN_S
    while True:
        md = client.list_topics(topic=args.name, timeout=15).topics.get(args.name)
        if md is not None and md.error is None and md.partitions:
            break
        if time.monotonic() > deadline:
            fail(f"created topic {args.name}, but it is not visible after {VISIBLE_WITHIN_S:.0f} s")
        time.sleep(0.2)
    rf = len(next(iter(md.partitions.values())).replicas)
    print(f"created topic {args.name} ({len(md.partitions)} partitions, replication factor {rf})")


def delete(args: argparse.Namespace) -> None:
    client = admin(args.bootstrap)
    result = wait(client.delete_topics([args.name], operation_timeout=30))[args.name]
    if isinstance(result, Exception):
        fail(f"cannot delete topic {args.name}: {result}")
    print(f"deleted topic {args.name}")


def list_topics(args: argparse.Namespace) -> None:
    md = admin(args.bootstrap).list_topics(timeout=15)
    for name in sorted(md.topics):
        print(name)


def describe(args: argparse.Namespace) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import ConfigResource

    client = admin(args.bootstrap)
    md = client.list_topics(topic=args.name, timeout=15) if args.name else client.list_topics(timeout=15)
    names = [args.name] if args.name else sorted(md.topics)
    out = console()
    for name in names:
        topic = md.topics.get(name)
        if topic is None or (topic.error is not None and topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            fail(f"topic {name} does not exist")
        if topic.error is not None:
            fail(f"topic {name}: {topic.error.str()}")
        table = Table(title=f"{name}  ({len(topic.partitions)} partitions)")
        for col in ("partition", "leader", "replicas", "isr"):
            table.add_column(col)
        for pid in sorted(topic.partitions):
            p = topic.partitions[pid]
            table.add_row(str(pid), str(p.leader), ",".join(map(str, p.replicas)), ",".join(map(str, p.isrs)))
        out.print(table)
        resource = ConfigResource("topic", name)
        configs = wait(client.describe_configs([resource]))[resource]
        if isinstance(configs, Exception):
            fail(f"cannot describe configs of {name}: {configs}")
        overrides = {k: v.value for k, v in configs.items() if not v.is_default and v.source == 1}
        out.print("configs: " + (", ".join(f"{k}={v}" for k, v in sorted(overrides.items())) or "(defaults)"))


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    topics = sub.add_parser("topics", help="manage topics")
    tsub = topics.add_subparsers(dest="action", required=True)
    p = tsub.add_parser("create", parents=[common], help="create a topic")
    p.add_argument("name", help="topic name")
    p.add_argument("--partitions", type=at_least_one, default=1, help="number of partitions")
    p.add_argument("--replication-factor", type=at_least_one, default=1, help="copies of each partition")
    p.add_argument("--config", action="append", metavar="KEY=VALUE", help="topic config (repeatable)")
    p.set_defaults(func=create)
    p = tsub.add_parser("list", parents=[common], help="list topics")
    p.set_defaults(func=list_topics)
    p = tsub.add_parser("describe", parents=[common], help="partitions, leaders, replicas, ISR, configs")
    p.add_argument("name", nargs="?", help="topic name (default: every topic)")
    p.set_defaults(func=describe)
    p = tsub.add_parser("delete", parents=[common], help="delete a topic")
    p.add_argument("name", help="topic name")
    p.set_defaults(func=delete)
    register_topic_commands(tsub, common)
