"""The testbed process: brings up the control plane, writes its state file, and tears it down on
SIGTERM, SIGINT, or when the process that owns it (a test session) is gone."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time

from . import cleanup
from .controlplane import ControlPlane
from .settings import TestbedSettings

log = logging.getLogger(__name__)


def write_state(settings: TestbedSettings, **fields: object) -> None:
    current = cleanup.read_state(settings)
    current.update(fields)
    tmp = settings.state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(current, indent=2))
    os.replace(tmp, settings.state_file)


async def _owner_gone(owner_pid: int) -> None:
    while True:
        await asyncio.sleep(1)
        try:
            os.kill(owner_pid, 0)
        except ProcessLookupError:
            log.info("owner process %d is gone; stopping", owner_pid)
            return


async def run(settings: TestbedSettings, owner_pid: int | None = None) -> None:
    started = time.monotonic()
    found = cleanup.clean(settings)
    if found:
        log.warning("removed leftovers of an earlier run: %s", found)
    settings.run_dir.mkdir(parents=True, exist_ok=True)
    (settings.run_dir / "logs").mkdir(exist_ok=True)
    write_state(settings, pid=os.getpid(), phase="starting", owner_pid=owner_pid,
                kubeconfig=str(settings.kubeconfig), bin_dir=str(settings.bin_dir))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    cp = ControlPlane(settings)
    try:
        creds = await cp.start()
        write_state(settings, phase="ready", startup_seconds=round(time.monotonic() - started, 2),
                    server=creds.server, timings=cp.timings)
        log.info("testbed ready in %.1fs", time.monotonic() - started)
        waiters = [asyncio.create_task(stop.wait())]
        if owner_pid:
            waiters.append(asyncio.create_task(_owner_gone(owner_pid)))
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for w in waiters:
            w.cancel()
    except Exception as exc:
        log.exception("testbed failed")
        write_state(settings, phase="failed", error=str(exc))
        raise
    finally:
        log.info("tearing down")
        write_state(settings, phase="stopping")
        await cp.stop()
        write_state(settings, phase="stopped", pid=None)
        log.info("testbed stopped")
