"""Finding and removing what a testbed run leaves on this machine: processes, network namespaces,
links, mounts, mount points it created. Used before every start (a stale run, e.g. after an
interrupted test session, is cleaned up) and by the teardown check."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from . import network
from .kubelet.agent import remove_empty_tree
from .processes import cmdline, kill_and_wait, pids_mentioning
from .settings import TestbedSettings

SUPERVISOR_OUT = "supervisor.out"  # written by the starting process before the supervisor cleans up


def read_state(settings: TestbedSettings) -> dict:
    try:
        return json.loads(settings.state_file.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def supervisor_pid(settings: TestbedSettings) -> int | None:
    pid = read_state(settings).get("pid")
    if pid and "dm_testbed" in cmdline(pid):
        return int(pid)
    return None


def stop_supervisor(settings: TestbedSettings, timeout_s: float = 60) -> bool:
    """SIGTERM to a running supervisor (it tears everything down itself); SIGKILL if it hangs."""
    pid = supervisor_pid(settings)
    if pid is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and "dm_testbed" in cmdline(pid):
        time.sleep(0.1)
    if "dm_testbed" in cmdline(pid):
        kill_and_wait([pid])
    return True


def host_mounts(settings: TestbedSettings) -> list[str]:
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4]
            if point.startswith(str(settings.run_dir)) or point.startswith(f"/run/netns/{settings.prefix}"):
                found.append(point)
    return found


def iptables_rules(settings: TestbedSettings) -> list[str]:
    """The testbed adds no iptables rules; this checks that none mentioning it exist."""
    rules = []
    for tool in ("iptables-save", "ip6tables-save"):
        if shutil.which(tool):
            out = subprocess.run([tool], capture_output=True, text=True, check=False).stdout
            rules += [line for line in out.splitlines() if settings.prefix in line or settings.bridge in line]
    return rules


def leftovers(settings: TestbedSettings) -> dict[str, list]:
    found: dict[str, list] = {"processes": pids_mentioning(str(settings.run_dir))}
    found.update(network.leftovers(settings))
    found["mounts"] = host_mounts(settings)
    found["iptables"] = iptables_rules(settings)
    record = settings.run_dir / "mountpoints.txt"
    found["mountpoints"] = [p for p in record.read_text().split("\n") if p and Path(p).exists()] \
        if record.exists() else []
    return {k: v for k, v in found.items() if v}


def clean(settings: TestbedSettings, keep_logs: bool = False) -> dict[str, list]:
    """Removes everything of a previous run; returns what it found."""
    stop_supervisor(settings)
    found = leftovers(settings)
    kill_and_wait(found.get("processes", []))
    network.remove_leftovers(settings)
    for point in sorted(host_mounts(settings), reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    for top in found.get("mountpoints", []):
        remove_empty_tree(Path(top))
    if settings.run_dir.exists():
        for entry in settings.run_dir.iterdir():
            if (keep_logs and entry.name == "logs") or entry.name == SUPERVISOR_OUT:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
    return found
