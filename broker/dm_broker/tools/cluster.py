"""`dm up`: a controller and N brokers as local processes, stopped together on Ctrl-C."""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path


def _start(cmd: list[str], log_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], dict]:
    log = log_path.open("ab")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=env)
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith(b"DM_READY"):
            return proc, json.loads(line.split(b" ", 1)[1])
        if not line and proc.poll() is not None:
            break
    raise SystemExit(f"dm up: {' '.join(cmd[3:5])} did not start; see {log_path}")


def run(args: argparse.Namespace) -> None:
    data = Path(args.data_dir).resolve()
    data.mkdir(parents=True, exist_ok=True)
    token_file = data / "controller.token"
    if not token_file.exists():
        token_file.write_text(secrets.token_hex(16))
        token_file.chmod(0o600)
    env = {**os.environ, "DM_CONTROLLER_TOKEN": token_file.read_text().strip()}
    py = [sys.executable, "-m", "dm_broker.cli"]
    overrides = []
    for item in args.override or []:
        overrides += ["--override", item]
    procs: list[subprocess.Popen[bytes]] = []
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    controller, info = _start([*py, "controller", "--data-dir", str(data / "controller"), "--port",
                               str(args.controller_port), *overrides], data / "controller.log", env)
    procs.append(controller)
    url = info["controller"]
    bootstrap = []
    for i in range(args.brokers):
        cmd = [*py, "broker", "--node-id", str(i), "--data-dir", str(data / f"broker-{i}"), "--port",
               str(args.port + i), "--http-port", str(args.http_port + i if args.http_port >= 0 else -1),
               "--controller", url, *overrides]
        proc, binfo = _start(cmd, data / f"broker-{i}.log", env)
        procs.append(proc)
        bootstrap.append(binfo["kafka"])
    servers = ",".join(bootstrap)
    metrics = (f"Metrics: http://127.0.0.1:{args.http_port}/metrics (broker i on port {args.http_port}+i)"
               if args.http_port >= 0 else "Metrics: off (--http-port -1)")
    print(f"""
dm cluster is running: controller {url}, {args.brokers} brokers.
Bootstrap servers: {servers}
Logs: {data}/*.log   {metrics}

  .venv/bin/dm topics create demo --partitions 6 --replication-factor 3 --bootstrap {bootstrap[0]}
  .venv/bin/dm topics describe demo --bootstrap {bootstrap[0]}
  seq 1 10 | .venv/bin/dm produce demo --bootstrap {bootstrap[0]}

Press Ctrl-C to stop the cluster.
""", flush=True)
    reported: set[int] = set()
    try:
        while not stopping:
            for i, proc in enumerate(procs):
                if proc.poll() is not None and i not in reported:
                    # A real cluster survives losing a process; say so and keep the rest running.
                    reported.add(i)
                    name = "the controller" if i == 0 else f"broker {i - 1}"
                    print(f"dm up: {name} exited with {proc.returncode} (see its log); the rest keeps running",
                          file=sys.stderr, flush=True)
            if len(reported) == len(procs):
                break
            time.sleep(0.2)
    finally:
        for proc in reversed(procs[1:]):  # brokers first: controlled shutdown needs the controller
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs[1:]:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if controller.poll() is None:
            controller.send_signal(signal.SIGTERM)
            controller.wait(10)
        print("dm cluster stopped.", flush=True)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("up", help="run a local cluster: a controller and N brokers")
    p.add_argument("--brokers", type=int, default=3)
    p.add_argument("--data-dir", default="./data")
    p.add_argument("--port", type=int, default=9092, help="Kafka port of broker 0; broker i uses port+i")
    p.add_argument("--http-port", type=int, default=8080,
                   help="HTTP port of broker 0; broker i uses port+i; -1: no HTTP port")
    p.add_argument("--controller-port", type=int, default=9990)
    p.add_argument("--override", action="append", metavar="KEY=VALUE", help="broker property for every broker")
    p.set_defaults(func=run)
