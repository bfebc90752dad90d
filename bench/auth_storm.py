"""A SCRAM producer's latency while wrong passwords rain on the same broker (issue 30).

    .venv/bin/python -m bench.auth_storm [--seconds 10] [--burst 500] [--label after]

One broker with a PLAINTEXT listener (set-up) and a SASL_PLAINTEXT one offering PLAIN and
SCRAM-SHA-512; user bob has a SCRAM-SHA-512 credential (4,096 iterations). A confluent-kafka producer
authenticated as bob sends one 100-byte record at a time (acks=all, linger 0) and times each
acknowledgement: first quietly, then while another process keeps `--burst` connections at a time
trying PLAIN as bob with wrong passwords (each check is a PBKDF2 of the credential's iterations).
Prints p50/p99 of both runs, the ratio, the failed logins answered per second and the broker's CPU;
appends to bench/results/auth_storm.jsonl. Run it against an older checkout with
PYTHONPATH=<checkout>/broker to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import time
from pathlib import Path

from .brokers import cpu_seconds, dm_broker, free_port

RESULTS = Path(__file__).parent / "results"
PLAIN_JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required;"


def producer(bootstrap: str):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bob", "sasl.password": "bob-pw",
                  "acks": "all", "linger.ms": 0})
    p.produce("storm", b"warm-up")
    p.flush(30)
    return p


def latencies(p, seconds: float) -> list[float]:
    out: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.perf_counter()
        p.produce("storm", b"x" * 100)
        p.flush(30)
        out.append(time.perf_counter() - started)
    return out


def storm(port: int, burst: int, seconds: float, counter) -> None:
    """Keeps `burst` wrong-password logins in flight for `seconds` (another process: its CPU is not
    the producer's)."""
    from dm_broker.protocol.client import KafkaConnection
    from dm_broker.security.setup import ClientSecurity

    async def one(i: int) -> None:
        wrong = ClientSecurity("SASL_PLAINTEXT", None, "PLAIN", "bob", f"guess-{i}")
        try:
            conn = await KafkaConnection.open("127.0.0.1", port, "storm", timeout=30, security=wrong)
            await conn.close()
        except Exception:
            with counter.get_lock():
                counter.value += 1

    async def run() -> None:
        deadline = time.monotonic() + seconds
        i = 0
        while time.monotonic() < deadline:
            await asyncio.gather(*(one(i + n) for n in range(burst)))
            i += burst

    asyncio.run(run())


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000)[int(q * 1000) - 1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--burst", type=int, default=500)
    parser.add_argument("--label", default="current")
    args = parser.parse_args()
    ports = {"PLAINTEXT": free_port(), "SASL_PLAINTEXT": free_port()}
    with dm_broker("inter.broker.listener.name=PLAINTEXT",
                   "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
                   f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_JAAS}",
                   listeners=ports) as (bootstrap, proc):
        from confluent_kafka.admin import (
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        admin = AdminClient({"bootstrap.servers": bootstrap})
        upsert = UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                              b"bob-pw")
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(15)
        sasl = f"127.0.0.1:{ports['SASL_PLAINTEXT']}"
        p = producer(sasl)  # connected and authenticated before the storm, and kept producing through it
        quiet = latencies(p, args.seconds)
        counter = multiprocessing.Value("i", 0)
        attacker = multiprocessing.Process(target=storm, args=(ports["SASL_PLAINTEXT"], args.burst,
                                                               args.seconds + 2, counter))
        cpu_before = cpu_seconds(proc.pid)
        attacker.start()
        time.sleep(1)  # the storm is on
        stormy = latencies(p, args.seconds)
        attacker.join(120)
        cpu = cpu_seconds(proc.pid) - cpu_before
    row = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "label": args.label, "burst": args.burst,
           "quiet_p50_ms": statistics.median(quiet) * 1000, "quiet_p99_ms": percentile(quiet, 0.99) * 1000,
           "storm_p50_ms": statistics.median(stormy) * 1000, "storm_p99_ms": percentile(stormy, 0.99) * 1000,
           "records_quiet": len(quiet), "records_storm": len(stormy),
           "failed_logins_per_s": counter.value / (args.seconds + 2), "broker_cpu_s_during_storm": cpu}
    row["p99_ratio"] = row["storm_p99_ms"] / row["quiet_p99_ms"]
    print(f"[{args.label}] quiet p50 {row['quiet_p50_ms']:.2f} ms p99 {row['quiet_p99_ms']:.2f} ms; "
          f"storm p50 {row['storm_p50_ms']:.2f} ms p99 {row['storm_p99_ms']:.2f} ms (x{row['p99_ratio']:.2f}); "
          f"{row['records_storm']} vs {row['records_quiet']} records; "
          f"{row['failed_logins_per_s']:.0f} failed logins/s; "
          f"broker CPU {cpu:.1f} s over {args.seconds + 1:.0f} s")
    RESULTS.mkdir(exist_ok=True)
    with (RESULTS / "auth_storm.jsonl").open("a") as f:
        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
