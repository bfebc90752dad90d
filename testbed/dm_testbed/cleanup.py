"""Finding and removing what a testbed run leaves on this machine: its processes and its run
directory. Used before every start (a stale run, e.g. after an interrupted test session, is cleaned
up) and by the teardown check."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time

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


def leftovers(settings: TestbedSettings) -> dict[str, list]:
    found: dict[str, list] = {"processes": pids_mentioning(str(settings.run_dir))}
    return {k: v for k, v in found.items() if v}


def clean(settings: TestbedSettings, keep_logs: bool = False) -> dict[str, list]:
    """Removes everything of a previous run; returns what it found."""
    stop_supervisor(settings)
    found = leftovers(settings)
    kill_and_wait(found.get("processes", []))
    if settings.run_dir.exists():
        for entry in settings.run_dir.iterdir():
            if (keep_logs and entry.name == "logs") or entry.name == SUPERVISOR_OUT:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
    return found
