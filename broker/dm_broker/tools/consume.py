"""`dm consume TOPIC`: print records (value, or key<TAB>value with --print-key)."""

from __future__ import annotations

import argparse
import sys
import time

from .client import fail


def run(args: argparse.Namespace) -> None:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException, TopicPartition

    conf = {"bootstrap.servers": args.bootstrap, "group.id": args.group or "dm-cli",
            "enable.auto.commit": bool(args.group), "enable.partition.eof": True,
            "auto.offset.reset": "earliest" if args.from_beginning else "latest"}
    as_member = bool(args.group) and args.partition is None and args.offset is None
    consumer = Consumer(conf)
    try:
        md = consumer.list_topics(args.topic, timeout=15).topics.get(args.topic)
        if md is None or md.error is not None:
            fail(f"topic {args.topic}: {md.error if md else 'not found'}")
        partitions = [args.partition] if args.partition is not None else sorted(md.partitions)
        if as_member:
            # A real group member: the group decides the partitions and where to resume.
            consumer.subscribe([args.topic])
        else:
            start = args.offset if args.offset is not None else OFFSET_BEGINNING if args.from_beginning \
                else OFFSET_END
            consumer.assign([TopicPartition(args.topic, p, start) for p in partitions])
        seen = 0
        eof: set[int] = set()
        deadline = time.monotonic() + args.timeout if args.timeout else None
        out = sys.stdout.buffer
        while args.max_messages is None or seen < args.max_messages:
            if deadline is not None and time.monotonic() > deadline:
                break
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    eof.add(msg.partition())
                    owned = {tp.partition for tp in consumer.assignment()} if as_member else set(partitions)
                    if args.exit_at_end and owned and eof >= owned:
                        break
                    continue
                raise KafkaException(msg.error())
            eof.discard(msg.partition())
            value = msg.value() or b""
            if args.print_key:
                out.write((msg.key() or b"") + b"\t" + value + b"\n")
            else:
                out.write(value + b"\n")
            out.flush()
            seen += 1
    finally:
        consumer.close()


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("consume", parents=[common], help="print records of a topic")
    p.add_argument("topic")
    p.add_argument("--from-beginning", action="store_true")
    p.add_argument("--partition", type=int)
    p.add_argument("--offset", type=int, help="start offset (with --partition)")
    p.add_argument("--group", help="consume as a member of this group (subscribe, commit offsets); with "
                   "--partition/--offset it reads those and commits under the group id")
    p.add_argument("--max-messages", type=int)
    p.add_argument("--timeout", type=float, help="stop after this many seconds")
    p.add_argument("--exit-at-end", action="store_true", help="stop when every partition is read to its end")
    p.add_argument("--print-key", action="store_true")
    p.set_defaults(func=run)
