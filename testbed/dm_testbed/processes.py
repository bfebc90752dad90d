"""Child processes of the testbed: started in their own session, killed with the testbed even when
it dies by SIGKILL (PR_SET_PDEATHSIG), and recognisable afterwards by the run directory in their
command line, which is how a stale run's leftovers are found."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL when the process that started it exits."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


async def spawn(argv: list[str], log_path: Path, env: dict[str, str] | None = None,
                cwd: Path | None = None) -> asyncio.subprocess.Process:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd=cwd,
            start_new_session=True, preexec_fn=die_with_parent)


async def terminate(proc: asyncio.subprocess.Process, grace_s: float) -> int | None:
    """SIGTERM to the process group, SIGKILL after `grace_s`; returns the exit code."""
    if proc.returncode is not None:
        return proc.returncode
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        return await asyncio.wait_for(proc.wait(), grace_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        return await proc.wait()


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def pids_mentioning(marker: str) -> list[int]:
    """Processes whose command line contains `marker` (the run directory), this one excluded."""
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != me and marker in cmdline(int(entry.name)):
            found.append(int(entry.name))
    return found


def kill_and_wait(pids: list[int], timeout_s: float = 5.0) -> list[int]:
    """SIGKILLs `pids` and waits until they are gone; returns those still alive (zombies of a parent
    that does not reap them count as gone)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _running(p)]
        if alive:
            time.sleep(0.05)
    return alive


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
