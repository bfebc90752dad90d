"""Test harness: real broker processes on 127.0.0.1 on free ports (outside the ephemeral range), and a TCP proxy that
can inject faults between a client and a broker."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _listening_range() -> tuple[int, int]:
    """Ports the kernel never hands out as the local port of an outgoing connection: a port taken
    from the ephemeral range and closed again can be reused by any connect() on the machine (the
    kind cluster's clients run beside the suite) before the broker binds it."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    start, end = (10000, low) if low - 10000 >= 5000 else (high + 1, 65536)
    return _this_workers_share(start, end)


def _this_workers_share(start: int, end: int) -> tuple[int, int]:
    """Under pytest-xdist, the worker's own slice of the range: two workers handing out the same port
    before either binds it would start two brokers on one port."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 1):
        return start, end
    width = (end - start) // int(count)
    first = start + int(worker[2:]) * width
    return first, first + width


# Its own generator: Hypothesis reseeds the global `random` for every test, which would hand each test
# the ports the previous one used (and its leftover clients would reach the new brokers).
_PORTS = random.Random()
_HANDED_OUT: set[int] = set()  # never the same port twice in one test process


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    start, end = _listening_range()
    for _ in range(500):
        port = _PORTS.randrange(start, end)
        if port not in _HANDED_OUT and _bindable(port):
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError(f"no free port in {start}-{end}")


def consecutive_free_ports(n: int) -> int:
    """A base port with the n ports from it free (`dm up` derives its brokers' ports from one)."""
    _, end = _listening_range()
    for _ in range(50):
        base = free_port()
        rest = range(base + 1, base + n)
        if base + n <= end and all(p not in _HANDED_OUT and _bindable(p) for p in rest):
            _HANDED_OUT.update(rest)
            return base
    raise RuntimeError("no consecutive free ports")


def reserve(ports: list[int]) -> bool:
    """Takes `ports` (ports a test derives from one it was given, as `dm up` derives its controller's)
    if every one is in this process's range, not handed out yet, and free."""
    start, end = _listening_range()
    if all(start <= p < end and p not in _HANDED_OUT and _bindable(p) for p in ports):
        _HANDED_OUT.update(ports)
        return True
    return False


# Every broker and controller this process started, so a failed test can show their logs (conftest.py)
STARTED_PROCESSES: list[BrokerProcess | ControllerProcess] = []


def _remember(process: BrokerProcess | ControllerProcess) -> None:
    if process not in STARTED_PROCESSES:
        STARTED_PROCESSES.append(process)


def log_tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a process's log ("" before it has one)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""


def run_dm(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The `dm` CLI as a user runs it, its output as text."""
    return subprocess.run([sys.executable, "-m", "dm_broker.cli", *args], input=stdin, capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)


class BrokerProcess:
    """`dm broker` as a subprocess; keeps its ports across restarts so clients reconnect."""

    def __init__(self, data_dir: Path, overrides: dict[str, object] | None = None, node_id: int = 0,
                 controller_url: str | None = None, host: str = "127.0.0.1", prefix: list[str] | None = None,
                 config_file: Path | None = None) -> None:
        self.data_dir = data_dir
        self.config_file = config_file  # a Kafka server.properties (--config), under the overrides
        self.host = host
        self.prefix = list(prefix or [])  # e.g. ["ip", "netns", "exec", NAME] to run in a namespace
        self.port = free_port()
        self.http_port = free_port()
        self.node_id = node_id
        self.overrides = dict(overrides or {})
        self.controller_url = controller_url
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-broker.log"
        self.http_auth: tuple[str, str] | None = None  # HTTP Basic for /metrics, where the broker asks for it

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        # An explicit log.dirs (several directories, JBOD) replaces --data-dir.
        dirs = [] if "log.dirs" in self.overrides else ["--data-dir", str(self.data_dir)]
        # With Kafka's `listeners` the ports are in there (self.port is then the first listener's).
        port = [] if "listeners" in self.overrides else ["--port", str(self.port)]
        cmd = [*self.prefix, sys.executable, "-m", "dm_broker.cli", "broker", "--host", self.host, *dirs,
               *port, "--http-port", str(self.http_port), "--node-id", str(self.node_id)]
        if self.controller_url:
            cmd += ["--controller", self.controller_url]
        if self.config_file is not None:
            cmd += ["--config", str(self.config_file)]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def start(self, timeout: float = 30) -> BrokerProcess:
        _remember(self)
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=log, cwd=REPO)
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith(b"DM_READY"):
                threading.Thread(target=self._drain, daemon=True).start()
                return self
            if not line and self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log_tail()}")
        raise TimeoutError(f"broker not ready after {timeout}s:\n{self.log_tail()}")

    def _drain(self) -> None:
        proc = self.proc
        if proc is not None and proc.stdout is not None:
            for _ in proc.stdout:
                pass

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)

    def kill(self) -> None:
        """SIGKILL: no flush, no checkpoint, like a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 20) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def http_get(self, path: str) -> tuple[int, str]:
        request = urllib.request.Request(f"http://{self.host}:{self.http_port}{path}")
        if self.http_auth is not None:
            token = base64.b64encode(":".join(self.http_auth).encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def metric(self, name: str, **labels: str) -> float:
        """Value of one sample from /metrics (0 when absent)."""
        value = self.sample(name, **labels)
        return 0.0 if value is None else value

    def sample(self, name: str, **labels: str) -> float | None:
        """Value of one sample from /metrics, None when the broker does not report it (a partition's
        samples exist only while the broker hosts its log)."""
        from prometheus_client.parser import text_string_to_metric_families

        _, text = self.http_get("/metrics")
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return float(sample.value)
        return None

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class FaultProxy:
    """Forwards TCP between clients and a broker. `drop_next_response(api_key)` closes the
    connection right after the broker answered a request of that API, so the client never sees
    the answer and must retry (the way a lost response looks in production)."""

    def __init__(self, target_port: int, kafka: bool = True) -> None:
        self.target_port = target_port
        self.kafka = kafka  # parse Kafka frames (needed for drop_responses); False for HTTP
        self.blocked = False
        self._sockets: set[socket.socket] = set()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._drops: dict[int, int] = {}
        self.dropped = 0
        self._stop = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    def block(self) -> None:
        """Network partition: cut every connection and refuse new ones until unblock()."""
        with self._lock:
            self.blocked = True
            for sock in list(self._sockets):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                    sock.close()
            self._sockets.clear()

    def unblock(self) -> None:
        with self._lock:
            self.blocked = False

    def drop_responses(self, api_key: int, count: int = 1) -> None:
        with self._lock:
            self._drops[api_key] = self._drops.get(api_key, 0) + count

    def _accept_loop(self) -> None:
        self.listener.settimeout(0.2)
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self.blocked:
                client.close()
                continue
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _pipe(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
        except OSError:
            client.close()
            return
        with self._lock:
            self._sockets.update((client, upstream))
        pending: list[int] = []  # api keys of requests in flight, in order
        cbuf = b""
        sbuf = b""
        sel = selectors.DefaultSelector()
        sel.register(client, selectors.EVENT_READ, "c")
        sel.register(upstream, selectors.EVENT_READ, "s")
        try:
            while not self._stop:
                for key, _ in sel.select(0.2):
                    data = key.fileobj.recv(1 << 20)
                    if not data:
                        return
                    if self.blocked:
                        return
                    if key.data == "c" and not self.kafka:
                        upstream.sendall(data)
                    elif key.data == "s" and not self.kafka:
                        client.sendall(data)
                    elif key.data == "c":
                        cbuf += data
                        while len(cbuf) >= 6:
                            (size,) = struct.unpack_from(">i", cbuf)
                            if len(cbuf) < 4 + size:
                                break
                            (api,) = struct.unpack_from(">h", cbuf, 4)
                            pending.append(api)
                            cbuf = cbuf[4 + size :]
                        upstream.sendall(data)
                    else:
                        sbuf += data
                        out = b""
                        while len(sbuf) >= 4:
                            (size,) = struct.unpack_from(">i", sbuf)
                            if len(sbuf) < 4 + size:
                                break
                            api = pending.pop(0) if pending else -1
                            frame, sbuf = sbuf[: 4 + size], sbuf[4 + size :]
                            with self._lock:
                                if self._drops.get(api, 0) > 0:
                                    self._drops[api] -= 1
                                    self.dropped += 1
                                    client.sendall(out)
                                    return
                            out += frame
                        if out:
                            client.sendall(out)
        except OSError:
            pass
        finally:
            with self._lock:
                self._sockets.discard(client)
                self._sockets.discard(upstream)
            with contextlib.suppress(OSError):
                client.close()
            with contextlib.suppress(OSError):
                upstream.close()

    def close(self) -> None:
        self._stop = True
        self.listener.close()


@contextlib.contextmanager
def running_broker(data_dir: Path, overrides: dict[str, object] | None = None) -> Iterator[BrokerProcess]:
    """A broker for a block of tests (a module fixture); it must still be alive at the end."""
    broker = BrokerProcess(data_dir, overrides)
    broker.start()
    try:
        yield broker
        assert broker.alive(), "the broker died during the tests:\n" + broker.log_tail()
    finally:
        broker.stop()


def listeners(data_dir: Path) -> dict[str, object]:
    return json.loads((data_dir / "__dm_meta" / "listeners.json").read_text())




class ControllerProcess:
    """`dm controller` as a subprocess on a fixed port (so brokers find it after a restart)."""

    def __init__(self, data_dir: Path, overrides: dict[str, object] | None = None, host: str = "127.0.0.1") -> None:
        self.data_dir = data_dir
        self.host = host
        self.port = free_port()
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / "controller.log"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30) -> ControllerProcess:
        cmd = [sys.executable, "-m", "dm_broker.cli", "controller", "--data-dir", str(self.data_dir),
               "--port", str(self.port), "--host", self.host]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        _remember(self)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log_path.open("ab"), cwd=REPO)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith(b"DM_READY"):
                return self
            if not line and self.proc.poll() is not None:
                break
        raise RuntimeError("controller did not start:\n" + self.log_tail())

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def netns_available() -> bool:
    """Network namespaces need root and iproute2 (true on this project's machines and CI)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    name = f"dmprobe{os.getpid()}"
    ok = subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode == 0
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return ok


class NetnsLink:
    """A network namespace joined to the host by a veth pair (a /30 of its own). A process started
    with `prefix` lives on the far side; `cut()` takes the host end down: a real partition."""

    def __init__(self) -> None:
        import random

        tag = f"{os.getpid() % 10000}{random.randrange(100)}"
        self.name = f"dm{tag}"
        self.host_if, self.ns_if = f"vh{tag}", f"vn{tag}"
        net = random.randrange(*_this_workers_share(1, 250))  # no two xdist workers' links share a subnet
        self.host_ip, self.ns_ip = f"10.213.{net}.1", f"10.213.{net}.2"
        run = lambda *a: subprocess.run(a, check=True, capture_output=True)  # noqa: E731
        run("ip", "netns", "add", self.name)
        run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
        run("ip", "link", "set", self.ns_if, "netns", self.name)
        run("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
        run("ip", "link", "set", self.host_if, "up")
        run("ip", "netns", "exec", self.name, "ip", "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if)
        run("ip", "netns", "exec", self.name, "ip", "link", "set", self.ns_if, "up")
        run("ip", "netns", "exec", self.name, "ip", "link", "set", "lo", "up")

    @property
    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def cut(self) -> None:
        subprocess.run(["ip", "link", "set", self.host_if, "down"], check=True)

    def restore(self) -> None:
        subprocess.run(["ip", "link", "set", self.host_if, "up"], check=True)

    def destroy(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)


def small_volumes_available() -> bool:
    """A tmpfs of a given size stands in for a volume that fills up: mounting one needs root."""
    return os.geteuid() == 0 and shutil.which("mount") is not None


class SmallVolume:
    """A tmpfs of `size` mounted on `path`: a real file system that answers ENOSPC when full (no mock: the
    broker's writes fail as they would on a full persistent volume)."""

    def __init__(self, path: Path, size: str) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True,
                       capture_output=True)

    def grow(self, size: str) -> None:
        """As expanding a persistent volume does: the files stay, the space grows."""
        subprocess.run(["mount", "-o", f"remount,size={size}", str(self.path)], check=True, capture_output=True)

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True)

    def __enter__(self) -> SmallVolume:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Cluster:
    """A controller and N brokers as processes.

    isolation="proxy": every broker is reached (by clients and other brokers) through a FaultProxy
    on its advertised port and reaches the controller through a proxy of its own.
    isolation="netns": broker 0 runs in a network namespace behind a veth pair and everything else
    binds the host end of that link; isolate(0) takes the link down.
    """

    def __init__(self, tmp: Path, brokers: int = 3, overrides: dict[str, object] | None = None,
                 proxied: bool = False, isolation: str | None = None) -> None:
        isolation = isolation or ("proxy" if proxied else None)
        self.isolation = isolation
        self.netns = NetnsLink() if isolation == "netns" else None
        host = self.netns.host_ip if self.netns else "127.0.0.1"
        if self.netns is not None:  # a controller off loopback needs a token (dm controller refuses otherwise)
            overrides = {"controller.token": "netns-link-token", **(overrides or {})}
        self.controller = ControllerProcess(tmp / "controller", overrides, host=host)
        self.proxied = isolation == "proxy"
        proxied = self.proxied
        self.brokers: list[BrokerProcess] = []
        self.proxies: list[FaultProxy] = []
        self.controller_proxies: list[FaultProxy] = []
        for i in range(brokers):
            in_ns = self.netns is not None and i == 0
            broker = BrokerProcess(tmp / f"broker-{i}", overrides, node_id=i, controller_url=self.controller.url,
                                   host=self.netns.ns_ip if in_ns else host,
                                   prefix=self.netns.prefix if in_ns else None)
            if proxied:
                proxy = FaultProxy(broker.port)
                broker.overrides["advertised.port"] = proxy.port
                cproxy = FaultProxy(self.controller.port, kafka=False)
                broker.controller_url = f"http://127.0.0.1:{cproxy.port}"
                self.proxies.append(proxy)
                self.controller_proxies.append(cproxy)
            self.brokers.append(broker)

    def address(self, i: int) -> str:
        return f"127.0.0.1:{self.proxies[i].port}" if self.proxied else self.brokers[i].bootstrap

    @property
    def bootstrap(self) -> str:
        return ",".join(self.address(i) for i in range(len(self.brokers)))

    def start(self) -> Cluster:
        self.controller.start()
        for b in self.brokers:
            b.start()
        return self

    def isolate(self, i: int) -> None:
        if self.netns is not None:
            assert i == 0, "only broker 0 runs in its own namespace"
            self.netns.cut()
            return
        self.proxies[i].block()
        self.controller_proxies[i].block()

    def heal(self, i: int) -> None:
        if self.netns is not None:
            self.netns.restore()
            return
        self.proxies[i].unblock()
        self.controller_proxies[i].unblock()

    def metadata(self) -> dict:
        """The controller's view, straight from its API."""
        import urllib.request

        token = self.controller.overrides.get("controller.token")
        request = urllib.request.Request(self.controller.url + "/v1/metadata?version=-1",
                                         headers={"Authorization": f"Bearer {token}"} if token else {})
        with urllib.request.urlopen(request, timeout=10) as resp:
            return json.loads(resp.read())

    def leader(self, topic: str, partition: int) -> int:
        return self.metadata()["topics"][topic]["partitions"][partition]["leader"]

    def isr(self, topic: str, partition: int) -> list[int]:
        return self.metadata()["topics"][topic]["partitions"][partition]["isr"]

    def stop(self) -> None:
        for b in self.brokers:
            if b.alive():
                b.stop()
        self.controller.stop()
        for p in self.proxies + self.controller_proxies:
            p.close()
        if self.netns is not None:
            self.netns.destroy()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
