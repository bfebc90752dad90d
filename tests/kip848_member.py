"""A KIP-848 group member in its own process, so a test can SIGKILL it: consumes, commits after each
batch, prints `assigned <partitions>` when its assignment changes and `seen <partition> <offset>` per record.

usage: python kip848_member.py BOOTSTRAP GROUP TOPIC [INSTANCE_ID]
"""

from __future__ import annotations

import sys

from confluent_kafka import Consumer


def main() -> None:
    bootstrap, group, topic = sys.argv[1:4]
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False, "client.id": "subprocess-member"}
    if len(sys.argv) > 4:
        conf["group.instance.id"] = sys.argv[4]
    consumer = Consumer(conf)
    consumer.subscribe([topic])
    assigned: list[int] = []
    while True:
        msgs = [m for m in consumer.consume(500, 0.2) if m.error() is None]
        now = sorted(tp.partition for tp in consumer.assignment())
        if now != assigned:
            assigned = now
            print("assigned", " ".join(map(str, now)), flush=True)
        for m in msgs:
            print("seen", m.partition(), m.offset(), flush=True)
        if msgs:
            consumer.commit(asynchronous=False)


if __name__ == "__main__":
    main()
