"""Draws dm's Grafana dashboards (dm_broker.tools.dashboards) as PNGs for the docs, from a live local
cluster scraped by a real Prometheus (Debian's binary: scripts/install-tools.sh installs it).

    .venv/bin/python -m bench.dashboards [--minutes 4] [--out docs/dashboards]    (make dashboards)

A controller and 3 brokers (bench.replication.LocalCluster), Prometheus scraping each broker every 2 s,
the monitoring e2e's clients (tests/e2e/workloads/monitored_clients.py: a producer, a transactional
producer and a stalled consumer group), and broker 1 SIGKILLed and restarted half-way, so the health
panels show a failure and the recovery. Then every panel's queries over the run (query_range, Grafana's
variables as "All"), drawn with matplotlib, one PNG per dashboard. The operator's dashboard needs
Kubernetes (the operator's metrics) and is not drawn here; tests/e2e/test_monitoring.py runs its queries.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from dm_broker.tools import dashboards

from .brokers import free_port, wait_port
from .replication import FAST, LocalCluster

REPO = Path(__file__).resolve().parent.parent
CLIENTS = REPO / "tests" / "e2e" / "workloads" / "monitored_clients.py"
STEP_S = 5
NEEDS_KUBERNETES = {"dm-operator"}


def start_prometheus(cluster: LocalCluster, directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("prometheus")
    if binary is None:
        sys.exit("prometheus is not installed: make tools (Debian's prometheus package)")
    port = free_port()
    targets = [{"targets": [f"127.0.0.1:{p}"], "labels": {"instance": f"broker-{i}"}}
               for i, p in enumerate(cluster.http_ports)]
    config = {"global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
              "scrape_configs": [{"job_name": "dm-brokers", "static_configs": targets}]}
    (directory / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    proc = subprocess.Popen([binary, f"--config.file={directory / 'prometheus.yml'}",
                             f"--storage.tsdb.path={directory / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=(directory / "prometheus.log").open("wb"))
    wait_port(port)
    return proc, f"http://127.0.0.1:{port}/api/v1"


def query_range(api: str, expr: str, start: float, end: float) -> list[dict]:
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": STEP_S})
    with urllib.request.urlopen(f"{api}/query_range?{params}", timeout=30) as response:
        body = json.load(response)
    return body["data"]["result"]


def legend(template: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template).strip() or "value"


def with_gaps(values: list[list], start: float) -> tuple[list[float], list[float]]:
    """Minutes since start and values, with a NaN where samples are missing (a killed broker), so the
    line breaks there instead of bridging the gap."""
    xs: list[float] = []
    ys: list[float] = []
    previous = None
    for t, v in values:
        if previous is not None and float(t) - previous > 1.5 * STEP_S:
            xs.append((previous + STEP_S - start) / 60)
            ys.append(math.nan)
        xs.append((float(t) - start) / 60)
        ys.append(float(v))
        previous = float(t)
    return xs, ys


def draw(dashboard: dashboards.Dashboard, api: str, start: float, end: float, out: Path) -> Path:
    panels = dashboard.panels
    rows = math.ceil(len(panels) / 2)
    fig, axes = plt.subplots(rows, 2, figsize=(14, 2.8 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        ax.set_title(panel.title, fontsize=10, loc="left")
        series = [(query, s) for query in panel.queries
                  for s in query_range(api, dashboards.expanded(query.expr), start, end)]
        if panel.stat:  # Grafana's stat: the last value, over a faint sparkline of the run
            last = [float(s["values"][-1][1]) for _, s in series if s["values"]]
            for _, s in series:
                ax.fill_between(*with_gaps(s["values"], start), alpha=0.15)
            ax.text(0.5, 0.5, f"{last[-1]:,.0f}" if last else "no data", ha="center", va="center", fontsize=28,
                    transform=ax.transAxes)
            ax.set_xlim(0, (end - start) / 60)
            ax.set_yticks([])
            ax.tick_params(labelsize=8)
            continue
        for query, s in series[:12]:
            ax.plot(*with_gaps(s["values"], start), linewidth=1.2, label=legend(query.legend, s["metric"]))
        if not series:
            ax.text(0.5, 0.5, "no series (feature not in use)", ha="center", va="center", color="grey")
        ax.set_xlim(0, (end - start) / 60)
        ax.set_ylabel(panel.unit, fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if series:
            ax.legend(fontsize=7, loc="upper left", ncol=2)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_axis_off()
    fig.suptitle(f"{dashboard.title} (minutes since start; a broker SIGKILLed half-way)", fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    path = out / f"{dashboard.uid}.png"
    fig.savefig(path, dpi=70)
    plt.close(fig)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=4)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "dashboards")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="dm-dashboards-"))
    with LocalCluster(http=True, overrides=FAST) as cluster:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("orders", 3, 3, config={"min.insync.replicas": "2"})])["orders"].result(30)
        prometheus, api = start_prometheus(cluster, work)
        clients = subprocess.Popen([sys.executable, str(CLIENTS)], stdout=subprocess.DEVNULL,
                                   env={**os.environ, "BOOTSTRAP": cluster.bootstrap, "TOPIC": "orders",
                                        "GROUP": "stalled", "RATE": "200"})
        try:
            start = time.time()
            run_s = args.minutes * 60
            time.sleep(run_s / 2)
            print("bench.dashboards: SIGKILL broker 1", flush=True)
            cluster.procs[1].kill()
            cluster.procs[1].wait()
            time.sleep(20)
            cluster.start_broker(1)
            time.sleep(max(0.0, start + run_s - time.time()))
            end = time.time()
            for dashboard in dashboards.DASHBOARDS:
                if dashboard.uid not in NEEDS_KUBERNETES:
                    print(f"bench.dashboards: wrote {draw(dashboard, api, start, end, args.out)}")
        finally:
            clients.terminate()
            clients.wait(60)
            prometheus.terminate()
            prometheus.wait(30)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
