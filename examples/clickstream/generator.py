"""Produces JSON click events to a dm topic (default `clicks`), keyed by user.

    python examples/clickstream/generator.py --bootstrap 127.0.0.1:9092 --events 20000 --minutes 5

Event times are spread evenly over the given number of minutes ending now, so the streaming job
has complete one-minute windows to count as soon as it runs.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from datetime import UTC, datetime

PAGES = ["/", "/search", "/product/1", "/product/2", "/product/3", "/cart", "/checkout", "/help"]


def events(count: int, minutes: float, seed: int, end_ms: int | None = None) -> list[dict]:
    rng = random.Random(seed)
    end_ms = end_ms if end_ms is not None else int(time.time() * 1000)
    start_ms = end_ms - int(minutes * 60_000)
    out = []
    for i in range(count):
        ts = start_ms + (end_ms - start_ms) * i // max(count, 1)
        out.append({"user": f"u{rng.randrange(500)}", "page": rng.choice(PAGES),
                    "ts": datetime.fromtimestamp(ts / 1000, tz=UTC).isoformat(timespec="milliseconds")})
    return out


def produce(bootstrap: str, topic: str, batch: list[dict]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 10,
                         "compression.type": "zstd"})
    failures: list[str] = []

    def report(err, _msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            failures.append(str(err))

    for event in batch:
        while True:
            try:
                producer.produce(topic, json.dumps(event).encode(), key=event["user"].encode(), on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60) or failures:
        raise SystemExit(f"generator: {len(failures)} events were not acknowledged: {failures[:3]}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    produce(args.bootstrap, args.topic, events(args.events, args.minutes, args.seed))
    print(f"generator: {args.events} click events over {args.minutes:g} minutes → {args.topic}")


if __name__ == "__main__":
    main()
