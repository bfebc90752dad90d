"""Failover and restart at a given partition count (issue 31).

    .venv/bin/python -m bench.scale_failover [--partitions 3000] [--label current]

A local cluster (a controller and 3 brokers as processes, default settings) with `--partitions` RF 3
partitions (topics of 100), idle. Measured, in order:
- failover: broker 0 (leading about a third of the partitions) is SIGKILLed; the time until the
  controller's metadata shows none of them led by it, and the survivors' event-loop stalls over the 10 s
  after the kill (dm_event_loop_lag_seconds: probes late by more than 100 ms, and the bound the longest
  stayed under) while they make themselves leaders;
- restart after SIGKILL: broker 0 started again on its data; the time until its Kafka port accepts (its
  logs are recovered) and until the controller lists it unfenced;
- restart after a clean shutdown: broker 0 stopped with SIGTERM (waited for), then started; the same two
  times. RSS of the restarted broker is printed per partition replica it hosts.
Results are appended to bench/results/scale_failover.jsonl.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import time
import urllib.request

from .brokers import rss_mb
from .replication import RESULTS, LocalCluster
from .scale import create_all, described, loop_lag, stalls


def metadata(cluster: LocalCluster) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.cport}/v1/metadata?version=-1", timeout=30) as r:
        return json.loads(r.read())


def led_by(cluster: LocalCluster, node: int) -> int:
    return sum(1 for t in metadata(cluster)["topics"].values() for p in t["partitions"] if p["leader"] == node)


def serving(cluster: LocalCluster, node: int) -> bool:
    return any(b["node_id"] == node and not b["fenced"] for b in metadata(cluster)["brokers"])


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def until(check, what: str, timeout: float = 600, every: float = 0.02) -> float:
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{what}: not after {timeout:.0f} s")
        time.sleep(every)
    return time.monotonic() - started


def restart(cluster: LocalCluster) -> tuple[float, float]:
    started = time.monotonic()
    cluster.start_broker(0)
    until(lambda: port_open(cluster.ports[0]), "broker 0 listens", every=0.05)
    recovered = time.monotonic() - started
    until(lambda: serving(cluster, 0), "broker 0 unfenced", every=0.1)
    return recovered, time.monotonic() - started


def measure(partitions: int) -> dict:
    with LocalCluster(3, overrides=[], http=True) as cluster:
        create_all(cluster, partitions)
        time.sleep(15)
        leading = led_by(cluster, 0)
        survivors_before = loop_lag(cluster, [1, 2])
        killed = time.monotonic()
        cluster.procs[0].send_signal(signal.SIGKILL)
        cluster.procs[0].wait()
        until(lambda: led_by(cluster, 0) == 0, "no partition led by broker 0", every=0.02)
        failover = time.monotonic() - killed
        time.sleep(max(0.0, 10 - (time.monotonic() - killed)))
        survivors = stalls(survivors_before, loop_lag(cluster, [1, 2]))
        after_kill = restart(cluster)
        time.sleep(15)
        rss = rss_mb(cluster.procs[0].pid)
        cluster.procs[0].send_signal(signal.SIGTERM)
        cluster.procs[0].wait(300)
        after_stop = restart(cluster)
    row = {"partitions": partitions, "leading": leading, "failover_s": failover, "survivor_loop_stalls": survivors,
           "restart_after_kill_recovered_s": after_kill[0], "restart_after_kill_serving_s": after_kill[1],
           "restart_after_stop_recovered_s": after_stop[0], "restart_after_stop_serving_s": after_stop[1],
           "rss_mb": rss, "kb_per_replica": rss * 1024 / partitions}
    print(f"{partitions} partitions: broker 0 led {leading}, all led elsewhere {failover:.2f} s after SIGKILL "
          f"(survivors' loop: {described(survivors)}); "
          f"restart after SIGKILL: recovered {after_kill[0]:.1f} s, serving {after_kill[1]:.1f} s; after a clean "
          f"stop: recovered {after_stop[0]:.1f} s, serving {after_stop[1]:.1f} s; RSS {rss:.0f} MB "
          f"({row['kb_per_replica']:.1f} KB per replica)", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", default="3000")
    parser.add_argument("--label", default="current")
    args = parser.parse_args()
    rows = [measure(int(n)) for n in args.partitions.split(",")]
    RESULTS.mkdir(exist_ok=True)
    with (RESULTS / "scale_failover.jsonl").open("a") as f:
        f.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "label": args.label,
                            "measurements": rows}) + "\n")


if __name__ == "__main__":
    main()
