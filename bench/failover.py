"""Failover time with default settings: a local 3-broker cluster (controller and brokers as
processes), an idempotent acks=all producer on an RF=3 topic (min.insync.replicas=2), and the
leader of partition 0 killed with SIGKILL (or stopped with SIGTERM) under load. Measured: from the
kill to the acknowledgement of the first record produced after it.

    .venv/bin/python -m bench.failover [--rounds 10] [--signal kill|term] [--plot]

Results go to bench/results/failover-<signal>.json (and a plot with --plot).
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import threading
import time

from .replication import RESULTS, LocalCluster, create


def measure(cluster: LocalCluster, rounds: int, sig: signal.Signals) -> list[float]:
    from confluent_kafka import Producer

    create(cluster.bootstrap, "failover", 3, 3)
    acks: list[tuple[float, float]] = []  # (produced at, acknowledged at)
    stop = threading.Event()

    def produce() -> None:
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 1, "retry.backoff.ms": 20, "reconnect.backoff.ms": 20,
                      "reconnect.backoff.max.ms": 200})
        while not stop.is_set():
            sent = time.monotonic()
            p.produce("failover", b"x" * 100, partition=0,
                      on_delivery=lambda e, m, sent=sent: acks.append((sent, time.monotonic())) if not e else None)
            p.poll(0.002)
        p.flush(60)

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    times = []
    for _ in range(rounds):
        time.sleep(4)  # every replica back in the ISR, the producer at a steady rate
        victim = cluster.leader("failover", 0)
        killed = time.monotonic()
        cluster.procs[victim].send_signal(sig)
        while not any(sent > killed for sent, _ in acks[-2000:]):
            time.sleep(0.005)
        times.append(min(at for sent, at in acks[-5000:] if sent > killed) - killed)
        cluster.procs[victim].wait(60)
        cluster.start_broker(victim)
        print(f"  broker {victim} {sig.name}: first acknowledged write after {times[-1] * 1000:.0f} ms", flush=True)
    stop.set()
    t.join(60)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10, help="leader failures to measure")
    parser.add_argument("--signal", choices=["kill", "term"], default="kill", help="SIGKILL (a crash) or SIGTERM")
    parser.add_argument("--plot", action="store_true", help="write a plot next to the results")
    args = parser.parse_args()
    sig = signal.SIGKILL if args.signal == "kill" else signal.SIGTERM
    with LocalCluster(overrides=[]) as cluster:  # default broker.session.timeout.ms and friends
        times = measure(cluster, args.rounds, sig)
    result = {"signal": sig.name, "rounds": times, "median_s": statistics.median(times), "max_s": max(times)}
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"failover-{args.signal}.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"{sig.name} of the leader: median {result['median_s'] * 1000:.0f} ms, max {result['max_s'] * 1000:.0f} ms "
          f"over {len(times)} rounds -> {out}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3))
        ax.bar(range(1, len(times) + 1), [x * 1000 for x in times])
        ax.set_xlabel("round")
        ax.set_ylabel("ms to first acknowledged write")
        ax.set_title(f"leader {sig.name}, default settings")
        fig.tight_layout()
        fig.savefig(out.with_suffix(".png"))


if __name__ == "__main__":
    main()
