"""`dm groups list|describe|reset-offsets|delete` — lag the way kafka-consumer-groups shows it."""

from __future__ import annotations

import argparse

from rich.table import Table

from .client import admin, console, fail, settings, wait


def _group_description(client, group: str):
    result = wait(client.describe_consumer_groups([group]))[group]
    if isinstance(result, Exception):
        fail(f"cannot describe group {group}: {result}")
    return result


def _committed(client, group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    futures = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    result = wait(futures)[group]
    if isinstance(result, Exception):
        fail(f"cannot read committed offsets of {group}: {result}")
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions}


def _end_offsets(bootstrap: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(settings({"bootstrap.servers": bootstrap, "group.id": "dm-cli-lag"}))
    try:
        return {tp: consumer.get_watermark_offsets(TopicPartition(*tp), timeout=10) for tp in partitions}
    finally:
        consumer.close()


def list_groups(args: argparse.Namespace) -> None:
    client = admin(args.bootstrap)
    result = client.list_consumer_groups().result(15)
    for g in sorted(result.valid, key=lambda g: g.group_id):
        kind = g.type.name.lower() if getattr(g, "type", None) is not None else ""
        print(f"{g.group_id}\t{g.state.name if g.state else ''}\t{kind}")


def describe(args: argparse.Namespace) -> None:
    client = admin(args.bootstrap)
    desc = _group_description(client, args.group)
    committed = _committed(client, args.group)
    owners: dict[tuple[str, int], object] = {}
    for member in desc.members:
        for tp in member.assignment.topic_partitions:
            owners[(tp.topic, tp.partition)] = member
    partitions = sorted(set(committed) | set(owners))
    ends = _end_offsets(args.bootstrap, partitions)
    out = console()
    kind = desc.type.name.lower() if getattr(desc, "type", None) is not None else "classic"
    out.print(f"group {args.group} ({kind}): state {desc.state.name}, {len(desc.members)} members, "
                  f"assignor {desc.partition_assignor or '-'}, coordinator {desc.coordinator.id}")
    table = Table()
    for col in ("topic", "partition", "current-offset", "log-end-offset", "lag", "consumer-id", "host", "client-id"):
        table.add_column(col)
    total = 0
    for tp in partitions:
        current = committed.get(tp, -1001)
        high = ends.get(tp, (-1, -1))[1]
        lag = "-" if current < 0 else str(max(0, high - current))
        total += 0 if current < 0 else max(0, high - current)
        member = owners.get(tp)
        who = [getattr(member, name, "-") for name in ("member_id", "host", "client_id")]
        table.add_row(tp[0], str(tp[1]), "-" if current < 0 else str(current), str(high), lag, *who)
    out.print(table)
    out.print(f"total lag: {total}")


def reset_offsets(args: argparse.Namespace) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    client = admin(args.bootstrap)
    desc = _group_description(client, args.group)
    if desc.members:
        fail(f"group {args.group} has {len(desc.members)} active members; stop them first (offsets of an active "
             "group would be overwritten by its next commit)")
    md = client.list_topics(args.topic, timeout=15).topics.get(args.topic)
    if md is None or md.error is not None:
        fail(f"topic {args.topic}: {md.error if md else 'not found'}")
    ends = _end_offsets(args.bootstrap, [(args.topic, p) for p in md.partitions])
    targets = []
    for (topic, partition), (low, high) in sorted(ends.items()):
        if args.to_earliest:
            offset = low
        elif args.to_latest:
            offset = high
        else:
            offset = min(max(args.to_offset, low), high)
        targets.append(TopicPartition(topic, partition, offset))
    if not args.execute:
        for tp in targets:
            print(f"{tp.topic}\t{tp.partition}\t{tp.offset}\t(dry run: add --execute to apply)")
        return
    result = wait(client.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(args.group, targets)]))
    outcome = result[args.group]
    if isinstance(outcome, Exception):
        fail(f"cannot reset offsets of {args.group}: {outcome}")
    for tp in outcome.topic_partitions:
        print(f"{tp.topic}\t{tp.partition}\t{tp.offset}")


def delete(args: argparse.Namespace) -> None:
    client = admin(args.bootstrap)
    result = wait(client.delete_consumer_groups([args.group]))[args.group]
    if isinstance(result, Exception):
        fail(f"cannot delete group {args.group}: {result}")
    print(f"deleted group {args.group}")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    groups = sub.add_parser("groups", help="consumer groups and their lag")
    gsub = groups.add_subparsers(dest="action", required=True)
    p = gsub.add_parser("list", parents=[common], help="list groups with their state and type (classic or consumer)")
    p.set_defaults(func=list_groups)
    p = gsub.add_parser("describe", parents=[common], help="members, assignment, committed offsets and lag")
    p.add_argument("group", help="group id")
    p.set_defaults(func=describe)
    p = gsub.add_parser("reset-offsets", parents=[common], help="move an empty group's committed offsets")
    p.add_argument("group", help="group id")
    p.add_argument("--topic", required=True, help="topic whose offsets move")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--to-earliest", action="store_true", help="to each partition's first offset")
    where.add_argument("--to-latest", action="store_true", help="to each partition's end")
    where.add_argument("--to-offset", type=int, help="to this offset in every partition")
    p.add_argument("--execute", action="store_true", help="apply (without it, print the plan)")
    p.set_defaults(func=reset_offsets)
    p = gsub.add_parser("delete", parents=[common], help="delete an empty group and its offsets")
    p.add_argument("group", help="group id")
    p.set_defaults(func=delete)
