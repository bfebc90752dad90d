"""CPU work that holds up an event loop or the interpreter, for the tests that put a late loop down to its
cause. On a crowded machine (the suite beside the e2e lane, niced) a spinning thread also waits for a CPU,
and how long depends on its neighbours; the kernel's accounting then cannot say whether the loop was late
for its own work or for the CPU. These helpers spin as a real-time thread where that is allowed, so the
cause a test makes is the only one there is."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator


@contextlib.contextmanager
def without_waiting_for_a_cpu() -> Iterator[None]:
    """The calling thread runs real-time (SCHED_FIFO) inside the block, so no normal task takes its CPU;
    without CAP_SYS_NICE it stays as it is. The kernel's real-time throttling leaves normal tasks 5 %."""
    if not hasattr(os, "SCHED_FIFO"):
        yield
        return
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))  # 0: this thread, on Linux
    except PermissionError:
        yield
        return
    try:
        yield
    finally:
        os.sched_setscheduler(0, policy, param)


def spins(seconds: float) -> None:
    """`seconds` of this thread's CPU, as a real-time thread where allowed."""
    with without_waiting_for_a_cpu():
        deadline = time.thread_time() + seconds
        while time.thread_time() < deadline:
            pass


def holds_the_interpreter(n: int) -> None:
    """One C call: no other thread runs Python until it returns."""
    with without_waiting_for_a_cpu():
        sum(range(n))
