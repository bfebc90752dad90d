"""The operator's load on the Kubernetes API server: API calls per minute of an idle 3-broker cluster
with 50 Topics, and the calls of a failover (a broker SIGKILLed: its partitions get new leaders, each
changed Topic's status is written).

The operator runs in this process against the testbed's control plane (a real API server, no nodes),
with the calls of its API client counted (every call goes through `Kube.request`; kopf's watch streams
are not counted). The brokers are local processes registered with the operator's controller. The same
script measures an older checkout with `PYTHONPATH` pointing at its sources — how the numbers before
and after in docs/benchmarks.md were taken.

    .venv/bin/python -m bench.operator_api [--topics 50] [--partitions 3] [--idle-s 60] [--plot]

Needs the Kubernetes binaries (`make k8s-build`). Results go to bench/results/operator-api.json."""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .brokers import free_port, wait_port
from .replication import RESULTS

NS = "bench-api"
REPO = Path(__file__).resolve().parents[1]


def resource_of(path: str) -> str:
    parts = [p for p in path.split("?")[0].split("/") if p]
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:] if parts[:1] == ["apis"] else parts
    if parts[:1] == ["namespaces"] and len(parts) >= 3:
        parts = parts[2:]
    return (parts[0] + (f"/{parts[2]}" if len(parts) >= 3 else "")) if parts else "other"


class Counting:
    """Counts the operator's API calls by verb and resource (a wrapper around Kube.request)."""

    def __init__(self) -> None:
        self.calls: collections.Counter[tuple[str, str]] = collections.Counter()

    def install(self) -> None:
        from dm_operator.kube import Kube

        original = Kube.request
        counter = self.calls

        async def request(kube, method, path, *args, **kwargs):
            counter[(method, resource_of(path))] += 1
            return await original(kube, method, path, *args, **kwargs)

        Kube.request = request

    def snapshot(self) -> collections.Counter[tuple[str, str]]:
        return collections.Counter(self.calls)


def kubectl(tb, *args: str, input: str | None = None) -> str:
    return tb.kubectl(*args, input=input).stdout


def topics_ready(tb, count: int) -> bool:
    items = json.loads(kubectl(tb, "get", "topics", "-n", NS, "-o", "json"))["items"]
    ready = [t for t in items if any(c["type"] == "Ready" and c["status"] == "True"
                                     for c in t.get("status", {}).get("conditions", []))]
    return len(ready) >= count


def leaders(tb) -> dict[str, list[int]]:
    items = json.loads(kubectl(tb, "get", "topics", "-n", NS, "-o", "json"))["items"]
    return {t["metadata"]["name"]: [p["leader"] for p in t.get("status", {}).get("partitions", [])] for t in items}


async def wait_for(check, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await asyncio.to_thread(check):
            return
        await asyncio.sleep(0.5)
    raise SystemExit(f"bench: timed out waiting for {what}")


def per_minute(before: collections.Counter, after: collections.Counter, seconds: float) -> dict[str, float]:
    diff = after - before
    return {f"{verb} {res}": round(n * 60 / seconds, 1) for (verb, res), n in sorted(diff.items())}


def largest_status_bytes(tb) -> int:
    items = json.loads(kubectl(tb, "get", "topics", "-n", NS, "-o", "json"))["items"]
    return max(len(json.dumps(t.get("status", {}), separators=(",", ":"))) for t in items)


async def measure(tb, topics: int, idle_s: float, work: Path, partitions: int = 3) -> dict:
    from dm_operator.main import run
    from dm_operator.settings import OperatorSettings

    counting = Counting()
    counting.install()
    kubectl(tb, "apply", "--validate=false", "-f", str(REPO / "crds"))
    kubectl(tb, "create", "namespace", NS)
    kubectl(tb, "apply", "-n", NS, "-f", "-", input=json.dumps(
        {"apiVersion": "dm.dev/v1alpha1", "kind": "DMCluster", "metadata": {"name": "bench"},
         "spec": {"replicas": 3, "storage": {"size": "1Gi"}}}))
    port = free_port()
    settings = OperatorSettings(namespaces=[NS], port=port, controller_url=f"http://127.0.0.1:{port}")
    operator = asyncio.create_task(run(settings))
    brokers: dict[int, subprocess.Popen[bytes]] = {}
    try:
        await wait_for(lambda: "bench-controller-token" in kubectl(tb, "get", "secret", "-n", NS, "-o", "name"), 60,
                       "the token Secret")
        secret = json.loads(kubectl(tb, "get", "secret", "bench-controller-token", "-n", NS, "-o", "json"))
        token = base64.b64decode(secret["data"]["token"]).decode()
        ports = [free_port() for _ in range(3)]

        def start(i: int) -> None:
            env = {**os.environ, "DM_CONTROLLER_TOKEN": token}
            brokers[i] = subprocess.Popen(
                [sys.executable, "-m", "dm_broker.cli", "--log-level", "WARNING", "broker", "--node-id", str(i),
                 "--data-dir", str(work / f"b{i}"), "--port", str(ports[i]), "--http-port", "-1",
                 "--controller", f"http://127.0.0.1:{port}/clusters/{NS}/bench"],
                env=env, stdout=subprocess.DEVNULL, stderr=(work / f"b{i}.log").open("ab"))

        for i in range(3):
            start(i)
        await asyncio.gather(*(asyncio.to_thread(wait_port, p) for p in ports))
        docs = [{"apiVersion": "dm.dev/v1alpha1", "kind": "Topic", "metadata": {"name": f"t{i:03d}"},
                 "spec": {"cluster": "bench", "partitions": partitions, "replicas": 3}} for i in range(topics)]
        applied = time.monotonic()
        kubectl(tb, "apply", "-n", NS, "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
        await wait_for(lambda: topics_ready(tb, topics), 600, f"{topics} Ready Topics")
        ready_s = time.monotonic() - applied
        await asyncio.sleep(15)  # the preferred leaders are back, the status settled

        t0, c0 = time.monotonic(), counting.snapshot()
        await asyncio.sleep(idle_s)
        idle = per_minute(c0, counting.snapshot(), time.monotonic() - t0)

        before = await asyncio.to_thread(leaders, tb)
        victim = collections.Counter(p for ps in before.values() for p in ps).most_common(1)[0][0]
        led = sum(p == victim for ps in before.values() for p in ps)
        t1, c1 = time.monotonic(), counting.snapshot()
        brokers[victim].send_signal(signal.SIGKILL)
        await wait_for(lambda: all(victim not in ps for ps in leaders(tb).values()), 60, "new leaders in status")
        new_leaders_s = time.monotonic() - t1
        await asyncio.sleep(10)  # whatever follows the elections (ISR shrinks, conditions)
        failover_s = time.monotonic() - t1
        failover = counting.snapshot() - c1
        start(victim)
        return {"topics": topics, "partitions": topics * partitions, "ready_s": round(ready_s, 1),
                "largest_status_bytes": await asyncio.to_thread(largest_status_bytes, tb),
                "idle_calls_per_minute": idle, "idle_total_per_minute": round(sum(idle.values()), 1),
                "failover": {"partitions_led_by_victim": led, "window_s": round(failover_s, 1),
                             "new_leaders_in_status_s": round(new_leaders_s, 2),
                             "calls": {f"{v} {r}": n for (v, r), n in sorted(failover.items())},
                             "total": sum(failover.values())}}
    finally:
        for proc in brokers.values():
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)
        # While the operator runs: it sees the Topics go with their namespace, and holds nothing (ADR 0061).
        kubectl(tb, "delete", "namespace", NS, "--wait=false")
        with contextlib.suppress(SystemExit):
            await wait_for(lambda: tb.kubectl("get", "namespace", NS, check=False).returncode != 0, 120,
                           "the namespace gone")
        signal.raise_signal(signal.SIGTERM)  # the operator's own way to stop (its signal handler)
        try:
            await asyncio.wait_for(operator, 60)
        except BaseException:
            operator.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=50)
    parser.add_argument("--partitions", type=int, default=3, help="partitions per Topic")
    parser.add_argument("--idle-s", type=float, default=60)
    parser.add_argument("--label", default="current", help="what was measured (e.g. a commit)")
    parser.add_argument("--plot", action="store_true")
    parser.add_argument("--log-level", default="WARNING", help="the operator's log level")
    args = parser.parse_args()
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.path[:0] = [str(REPO / "testbed")]
    from dm_testbed.settings import TestbedSettings

    settings = TestbedSettings.from_env()
    # Before the Kubernetes client is imported: it reads KUBECONFIG once (kopf's login uses its default).
    os.environ["KUBECONFIG"] = str(settings.kubeconfig)
    from dm_testbed.client import Testbed

    tb = Testbed.attach(settings) if os.environ.get("DM_TESTBED_REUSE") == "1" else Testbed.start(settings)
    try:
        with tempfile.TemporaryDirectory(prefix="dm-api-bench-") as work:
            result = asyncio.run(measure(tb, args.topics, args.idle_s, Path(work), args.partitions))
    finally:
        if os.environ.get("DM_TESTBED_REUSE") != "1":
            tb.stop()
    result["label"] = args.label
    print(json.dumps(result, indent=1))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "operator-api.json"
    runs = json.loads(out.read_text()) if out.exists() else []
    runs.append(result)
    out.write_text(json.dumps(runs, indent=1))
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (idle, failover) = plt.subplots(1, 2, figsize=(9, 3.5))
        labels = [r["label"] for r in runs]
        idle.bar(labels, [r["idle_total_per_minute"] for r in runs])
        idle.set_title(f"idle, {runs[-1]['topics']} Topics: API calls/min")
        failover.bar(labels, [r["failover"]["total"] for r in runs])
        failover.set_title("one broker SIGKILLed: API calls")
        fig.tight_layout()
        fig.savefig(RESULTS / "operator-api.png")
        print(f"plot: {RESULTS / 'operator-api.png'}")


if __name__ == "__main__":
    main()
