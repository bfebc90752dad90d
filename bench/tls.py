"""Produce and consume over TLS against plaintext, and the broker's CPU per MB.

    .venv/bin/python -m bench.tls [--records-scale 1.0] [--warm-memory 6] [--plot]

One broker with a PLAINTEXT and an SSL listener (ECDSA P-256 certificate; TLS 1.3, which the clients
negotiate) on the same 2-core machine as the client. For 1 KiB and 16 KiB records, `dm bench produce`
(acks=1, no compression) then `dm bench consume` through each listener; the broker's CPU time
(utime + stime from /proc) during each run, divided by the megabytes moved, is its CPU cost per MB.
Plaintext consumers get record data with sendfile(2); TLS ones with pread + encryption.
Results go to bench/results/tls.jsonl; --plot draws docs/bench/tls.png.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import tempfile
import time
from pathlib import Path

from .brokers import cpu_seconds, dm_bench, dm_broker, free_port, warm_memory

RESULTS = Path(__file__).parent / "results"
OUT = Path(__file__).parent.parent / "docs" / "bench"
SCENARIOS = [(1024, 400_000), (16384, 40_000)]  # record size, records


def certificates(tmp: Path) -> tuple[Path, Path]:
    """The broker's key and certificate (broker.pem) and the client's settings trusting its CA."""
    from dm_broker.security import pki

    ca = pki.new_ca("CN=bench-ca", datetime.timedelta(days=1))
    server = pki.issue(ca, "CN=broker", datetime.timedelta(days=1), ip_addresses=["127.0.0.1"])
    (tmp / "broker.pem").write_text(server.key_pem + server.cert_pem)
    (tmp / "ca.pem").write_text(ca.cert_pem)
    client = tmp / "client.properties"
    client.write_text(f"security.protocol=SSL\nssl.ca.location={tmp / 'ca.pem'}\n")
    return tmp / "broker.pem", client


def measure(kind: str, bootstrap: str, pid: int, size: int, records: int, topic: str, extra: list[str]) -> dict:
    before = cpu_seconds(pid)
    result = dm_bench(kind, bootstrap, "--record-size", str(size), "--records", str(records), "--topic", topic,
                      "--acks", "1", *extra)
    cpu = cpu_seconds(pid) - before
    mb = result["mb_per_s"] * result["seconds"] if "seconds" in result else records * size / 1e6
    return {"records_per_s": result["records_per_s"], "mb_per_s": result["mb_per_s"],
            "broker_cpu_s": cpu, "broker_cpu_ms_per_mb": cpu * 1000 / mb}


def plot(row: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['kind']} {r['size'] // 1024} KiB" for r in row["plaintext"]]
    x = range(len(labels))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for offset, name in ((-0.2, "plaintext"), (0.2, "tls")):
        left.bar([i + offset for i in x], [r["mb_per_s"] for r in row[name]], width=0.4, label=name)
        right.bar([i + offset for i in x], [r["broker_cpu_ms_per_mb"] for r in row[name]], width=0.4, label=name)
    for ax, title in ((left, "MB/s"), (right, "broker CPU ms per MB")):
        ax.set_xticks(list(x), labels, rotation=15)
        ax.set_ylabel(title)
        ax.legend()
    fig.suptitle("One broker, TLS 1.3 against plaintext, client on the same 2-core machine")
    fig.tight_layout()
    OUT.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT / "tls.png", dpi=110)
    print(f"wrote {OUT / 'tls.png'}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records-scale", type=float, default=1.0)
    parser.add_argument("--warm-memory", type=float, default=6.0)
    parser.add_argument("--plot", action="store_true")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dm-tls-bench-"))
    keystore, client = certificates(tmp)
    ports = {"PLAINTEXT": free_port(), "SSL": free_port()}
    row: dict = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "plaintext": [], "tls": []}
    try:
        with dm_broker("inter.broker.listener.name=PLAINTEXT", f"ssl.keystore.location={keystore}",
                       listeners=ports) as (_, proc):
            for size, records in SCENARIOS:
                records = int(records * args.records_scale)
                for name, port, extra in (("plaintext", ports["PLAINTEXT"], []),
                                          ("tls", ports["SSL"], ["--command-config", str(client)])):
                    topic = f"{name}-{size}"
                    for kind in ("produce", "consume"):
                        warm_memory(args.warm_memory)
                        r = measure(kind, f"127.0.0.1:{port}", proc.pid, size, records, topic, extra)
                        row[name].append({"kind": kind, "size": size, **r})
                        print(f"{name:>9} {kind:>7} {size:>6} B: {r['records_per_s']:>10,.0f} rec/s "
                              f"{r['mb_per_s']:>7.1f} MB/s  broker CPU {r['broker_cpu_ms_per_mb']:.2f} ms/MB",
                              flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the certificates (the broker's data goes with dm_broker)
    RESULTS.mkdir(exist_ok=True)
    with (RESULTS / "tls.jsonl").open("a") as f:
        f.write(json.dumps(row) + "\n")
    if args.plot:
        plot(row)


if __name__ == "__main__":
    main()
