"""`dm consume TOPIC`: print records (value, or key<TAB>value with --print-key)."""

from __future__ import annotations

import argparse
import sys
import time

from .client import fail, settings


def run(args: argparse.Namespace) -> None:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException, TopicPartition

    if args.offset is not None and args.partition is None:
        fail("--offset needs --partition")
    # With an explicit offset, a position that is (or becomes) out of range is an error to report,
    # not a silent jump to the end (where the CLI would then wait forever).
    reset = "error" if args.offset is not None else "earliest" if args.from_beginning else "latest"
    conf = {"bootstrap.servers": args.bootstrap, "group.id": args.group or "dm-cli",
            "enable.auto.commit": bool(args.group), "enable.partition.eof": True, "auto.offset.reset": reset}
    as_member = bool(args.group) and args.partition is None and args.offset is None
    consumer = Consumer(settings(conf))
    try:
        md = consumer.list_topics(args.topic, timeout=15).topics.get(args.topic)
        if md is None or md.error is not None:
            fail(f"topic {args.topic} does not exist" if md is None or md.error.code() ==
                 KafkaError.UNKNOWN_TOPIC_OR_PART else f"topic {args.topic}: {md.error.str()}")
        if args.partition is not None and args.partition not in md.partitions:
            fail(f"topic {args.topic} has no partition {args.partition} (it has {len(md.partitions)})")
        partitions = [args.partition] if args.partition is not None else sorted(md.partitions)
        if args.offset is not None:
            low, high = consumer.get_watermark_offsets(TopicPartition(args.topic, args.partition), timeout=15)
            if not low <= args.offset <= high:
                fail(f"offset {args.offset} is out of range for {args.topic}-{args.partition}: it holds offsets "
                     f"{low} to {high - 1} (the next record written gets {high})")
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
                if msg.error().code() == KafkaError._AUTO_OFFSET_RESET:
                    fail(f"{args.topic}-{msg.partition()}: {msg.error().str()}")
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
    p.add_argument("topic", help="topic to read")
    p.add_argument("--from-beginning", action="store_true", help="start at the earliest offset (else: new records)")
    p.add_argument("--partition", type=int, help="read only this partition")
    p.add_argument("--offset", type=int, help="start offset (with --partition)")
    p.add_argument("--group", help="consume as a member of this group (subscribe, commit offsets); with "
                   "--partition/--offset it reads those and commits under the group id")
    p.add_argument("--max-messages", type=int, help="stop after this many records")
    p.add_argument("--timeout", type=float, help="stop after this many seconds")
    p.add_argument("--exit-at-end", action="store_true", help="stop when every partition is read to its end")
    p.add_argument("--print-key", action="store_true", help="print key<TAB>value")
    p.set_defaults(func=run)
