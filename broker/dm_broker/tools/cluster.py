"""`dm up`: a controller and N brokers as local processes, stopped together on Ctrl-C."""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ..config import ConfigError, read_properties
from ..dirlock import DirectoryInUse, DirectoryLock

DEFAULT_PORT = 9092
DEFAULT_CONTROLLER_PORT = 9990
DEFAULT_HTTP_PORT = 8080
DEFAULT_REST_PORT = 8092  # Confluent's 8082 is broker 2's side port here (8080+i)


class StartFailed(Exception):
    pass


def plan_ports(port: int, brokers: int, controller_port: int | None, http_port: int | None,
               rest_port: int | None = None) -> dict[str, int]:
    """Every port a local cluster listens on. Unset controller, HTTP and REST ports move with --port, so
    a second cluster on other Kafka ports needs no other flag (--port 9192: controller 10090,
    HTTP 8180+i, REST 8192+i)."""
    shift = port - DEFAULT_PORT
    controller = controller_port if controller_port is not None else DEFAULT_CONTROLLER_PORT + shift
    http = http_port if http_port is not None else DEFAULT_HTTP_PORT + shift
    rest = rest_port if rest_port is not None else DEFAULT_REST_PORT + shift
    ports = {"controller": controller}
    for i in range(brokers):
        ports[f"broker {i}"] = port + i
        if http >= 0:
            ports[f"broker {i} HTTP"] = http + i
        if rest >= 0:
            ports[f"broker {i} REST"] = rest + i
    return ports


def busy_ports(ports: dict[str, int], host: str = "127.0.0.1") -> list[str]:
    taken = []
    for name, number in ports.items():
        if number == 0:
            continue
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers themselves bind
            try:
                s.bind((host, number))
            except OSError:
                taken.append(f"{number} ({name})")
    return taken


def _start(cmd: list[str], log_path: Path, env: dict[str, str], stopping: list[bool]) -> tuple[subprocess.Popen, dict]:
    """Starts a process and waits for its DM_READY line; a Ctrl-C meanwhile stops waiting."""
    with log_path.open("ab") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=env)
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not stopping[0]:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if not ready:
            continue
        line = proc.stdout.readline()
        if line.startswith(b"DM_READY"):
            return proc, json.loads(line.split(b" ", 1)[1])
        if not line and proc.poll() is not None:
            break
    if proc.poll() is None:
        proc.terminate()
        proc.wait(10)
    if stopping[0]:
        raise StartFailed("interrupted")
    tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
    raise StartFailed(f"{' '.join(cmd[3:5])} did not start (exit {proc.returncode}): " + " | ".join(tail)
                      + f"\n  full log: {log_path}")


def run(args: argparse.Namespace) -> None:
    data = Path(args.data_dir).resolve()
    if args.brokers < 1:
        raise SystemExit("dm up: --brokers must be at least 1")
    try:
        lock = DirectoryLock(data, "dm up").acquire()
    except DirectoryInUse as exc:
        raise SystemExit(f"dm up: {exc}") from None
    ports = plan_ports(args.port, args.brokers, args.controller_port, args.http_port, args.rest_port)
    taken = busy_ports(ports)
    if taken:
        raise SystemExit(f"dm up: port{'s' if len(taken) > 1 else ''} {', '.join(taken)} already in use; "
                         "choose others with --port, --controller-port, --http-port and --rest-port")
    token_file = data / "controller.token"
    if not token_file.exists():
        token_file.write_text(secrets.token_hex(16))
        token_file.chmod(0o600)
    env = {**os.environ, "DM_CONTROLLER_TOKEN": token_file.read_text().strip()}
    py = [sys.executable, "-m", "dm_broker.cli"]
    try:
        base = read_properties(Path(args.config)) if args.config else {}
    except (OSError, ConfigError) as exc:
        raise SystemExit(f"dm up: --config {args.config}: {exc}") from None
    for item in args.override or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"dm up: --override expects key=value, got {item!r}")
        base[key] = value

    def properties(name: str, node: str, port: int) -> list[str]:
        """The properties file of one process (placeholders filled in): its --config option."""
        rendered = {k: render(v, node, port) for k, v in base.items()}
        if not rendered:
            return []
        path = data / f"{name}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in rendered.items()))
        path.chmod(0o600)  # it may hold passwords (sasl.jaas.config)
        return ["--config", str(path)]

    procs: list[subprocess.Popen[bytes]] = []
    stopping = [False]

    def stop(*_: object) -> None:
        if stopping[0]:
            print("dm up: stopping already; waiting for the processes to exit", file=sys.stderr, flush=True)
        stopping[0] = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        # A controller that lost its state recovers it from the brokers: it knows how many to wait for.
        expected = ["--override", f"controller.recovery.expected.brokers={args.brokers}"]
        controller, info = _start([*py, "controller", "--data-dir", str(data / "controller"), "--port",
                                   str(ports["controller"]), *expected,
                                   *properties("controller", "controller", ports["controller"])],
                                  data / "controller.log", env, stopping)
        procs.append(controller)
        url = info["controller"]
        bootstrap = []
        rest_uris: list[str] = []
        for i in range(args.brokers):
            http = ports.get(f"broker {i} HTTP", -1)
            port = ports[f"broker {i}"]
            # With Kafka's `listeners` the ports are in there ({port}, {port+N}); otherwise --port.
            port_option = [] if "listeners" in base else ["--port", str(port)]
            rest = ports.get(f"broker {i} REST")
            rest_option = ["--override", f"http.listeners=HTTP://127.0.0.1:{rest}"] \
                if rest is not None and "http.listeners" not in base else []
            cmd = [*py, "broker", "--node-id", str(i), "--data-dir", str(data / f"broker-{i}"), *port_option,
                   "--http-port", str(http), "--controller", url, *properties(f"broker-{i}", str(i), port),
                   *rest_option]
            proc, binfo = _start(cmd, data / f"broker-{i}.log", env, stopping)
            procs.append(proc)
            bootstrap.append(binfo["kafka"])
            rest_uris.extend(binfo.get("rest", {}).values())
    except StartFailed as exc:
        _stop_all(procs)
        lock.release()
        if str(exc) == "interrupted":
            print("dm up: interrupted during start-up; stopped.", file=sys.stderr)
            raise SystemExit(130) from None
        raise SystemExit(f"dm up: {exc}") from None
    servers = ",".join(bootstrap)
    http_base = ports.get("broker 0 HTTP")
    metrics = (f"Metrics: http://127.0.0.1:{http_base}/metrics (broker i on port {http_base}+i)"
               if http_base is not None else "Metrics: off (--http-port -1)")
    rest_line = (f"REST Proxy (v2): {', '.join(rest_uris)}" if rest_uris else "REST Proxy: off (--rest-port -1)")
    curl = (f"\n  curl -s -X POST -H 'Content-Type: application/vnd.kafka.json.v2+json' "
            f"--data '{{\"records\":[{{\"value\":{{\"hello\":\"dm\"}}}}]}}' {rest_uris[0]}/topics/demo"
            if rest_uris else "")
    print(f"""
dm cluster is running: controller {url}, {args.brokers} brokers.
Bootstrap servers: {servers}
Logs: {data}/*.log   {metrics}
{rest_line}

  .venv/bin/dm topics create demo --partitions 6 --replication-factor {min(3, args.brokers)} --bootstrap {bootstrap[0]}
  .venv/bin/dm topics describe demo --bootstrap {bootstrap[0]}
  seq 1 10 | .venv/bin/dm produce demo --bootstrap {bootstrap[0]}{curl}

Press Ctrl-C to stop the cluster.
""", flush=True)
    reported: set[int] = set()
    try:
        while not stopping[0]:
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
        _stop_all(procs)
        lock.release()
        print("dm cluster stopped.", flush=True)


_PLACEHOLDER = re.compile(r"\{(id|port)(?:\+(\d+))?\}")


def render(value: str, node: str, port: int) -> str:
    """`{id}` is the broker's id, `{port}` its Kafka port and `{port+N}` that plus N: what differs
    between the brokers of `dm up`, in otherwise shared properties (listeners, advertised.listeners)."""
    def fill(m: re.Match[str]) -> str:
        if m.group(1) == "id":
            return node
        return str(port + int(m.group(2) or 0))

    return _PLACEHOLDER.sub(fill, value)


def _stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    """Brokers first (their controlled shutdown needs the controller), then the controller."""
    for proc in reversed(procs[1:]):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs[1:]:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if procs and procs[0].poll() is None:
        procs[0].send_signal(signal.SIGTERM)
        try:
            procs[0].wait(10)
        except subprocess.TimeoutExpired:
            procs[0].kill()
            procs[0].wait()


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("up", help="run a local cluster: a controller and N brokers")
    p.add_argument("--brokers", type=int, default=3, help="number of brokers")
    p.add_argument("--data-dir", default="./data", help="directory of the cluster's data and logs")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="Kafka port of broker 0; broker i uses port+i")
    p.add_argument("--http-port", type=int,
                   help=f"HTTP port of broker 0, broker i uses port+i; -1: no HTTP port "
                        f"(default: {DEFAULT_HTTP_PORT} moved by as much as --port is)")
    p.add_argument("--rest-port", type=int,
                   help=f"REST Proxy port of broker 0, broker i uses port+i; -1: no REST Proxy "
                        f"(default: {DEFAULT_REST_PORT} moved by as much as --port is)")
    p.add_argument("--controller-port", type=int,
                   help=f"controller port (default: {DEFAULT_CONTROLLER_PORT} moved by as much as --port is)")
    p.add_argument("--config", metavar="FILE",
                   help="Kafka server.properties for every broker (and the controller); {id}, {port} and "
                        "{port+N} are filled in per broker, e.g. listeners=PLAINTEXT://:{port},SASL_SSL://:{port+100}")
    p.add_argument("--override", action="append", metavar="KEY=VALUE",
                   help="broker property for every broker (over --config; placeholders as there)")
    p.set_defaults(func=run)
