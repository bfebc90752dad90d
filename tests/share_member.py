"""A share consumer in its own process, so a test can SIGKILL it while it holds record locks: polls in
explicit mode and never acknowledges, printing `held <partition> <offset>` for each record it gets.

usage: python share_member.py BOOTSTRAP GROUP TOPIC
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import ShareConsumer


def main() -> None:
    bootstrap, group, topic = sys.argv[1:4]
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "lock-holder",
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    while True:
        msgs = [m for m in consumer.poll(0.5) if m.error() is None]
        for m in msgs:
            print("held", m.partition(), m.offset(), flush=True)
        if msgs:  # explicit mode refuses another poll until these are acknowledged: hold them
            while True:
                time.sleep(0.2)


if __name__ == "__main__":
    main()
