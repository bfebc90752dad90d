"""Reports an event loop that stopped turning: a blocking call on it holds up every request the
process serves (a probe that times out, heartbeats that stop). A thread notices that the loop's
heartbeat is late and logs where the loop is stuck, once per stall, with what the loop's thread did
meanwhile by the kernel's accounting (ADR 0057's causes): only a loop that was on a CPU, or in a blocking
call, is stuck where its stack says; one that waited for a CPU or for another thread is merely there."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from collections import deque

from .loop_stalls import StallCause, ThreadClock, ThreadTimes, stall_cause

log = logging.getLogger(__name__)

WHAT_THE_STACK_SAYS = {
    StallCause.BUSY: "work on the loop, at this stack",
    StallCause.BLOCKED: "a blocking call, at this stack",
    StallCause.RUN_QUEUE: "the stack is only where the loop was when a CPU came free",
    StallCause.OTHER_THREAD: "the stack is only where the loop waited for the interpreter",
}


class LoopWatchdog:
    def __init__(self, threshold_s: float = 2.0, beat_s: float = 0.25) -> None:
        self.threshold_s = threshold_s
        self.beat_s = beat_s
        self.stalls: list[float] = []  # how long each reported stall had lasted when it was noticed
        self.causes: list[StallCause | None] = []  # and what it is put down to, where that can be read
        self._last_beat = 0.0  # set by start(), on the loop's thread
        self._loop_thread: tuple[int, int] = (0, 0)  # threading's ident and the kernel's id
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="loop-watchdog", daemon=True)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """From the loop's thread."""
        self._loop_thread = (threading.get_ident(), threading.get_native_id())
        self._last_beat = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._beat())
        self._thread.start()

    async def stop(self) -> None:
        self._stopped.set()
        if self._task is not None:
            self._task.cancel()

    async def _beat(self) -> None:
        while True:
            self._last_beat = time.monotonic()
            await asyncio.sleep(self.beat_s)

    def _watch(self) -> None:
        clock = ThreadClock(self._loop_thread)
        # the loop thread's times at each look, for as long as a stall takes to report: the accounting of a
        # stall starts at the last look before the loop's last beat
        looks: deque[tuple[float, ThreadTimes]] = deque(maxlen=int(self.threshold_s / self.beat_s) + 4)
        try:
            reported = False
            while not self._stopped.wait(self.beat_s):
                now = time.monotonic()
                looks.append((now, clock.read()))
                late = now - self._last_beat
                if late < self.threshold_s:
                    reported = False
                elif not reported:
                    reported = True
                    last_beat = self._last_beat
                    since, before = next((look for look in reversed(looks) if look[0] <= last_beat), looks[0])
                    self._report(late, now - since, looks[-1][1].since(before) if clock.readable else None)
        finally:
            clock.close()

    def _report(self, late: float, accounted_s: float, spent: ThreadTimes | None) -> None:
        self.stalls.append(late)
        frame = sys._current_frames().get(self._loop_thread[0])
        where = "".join(traceback.format_stack(frame)) if frame is not None else "(unknown)\n"
        if spent is None:  # this platform cannot read the loop thread's CPU
            self.causes.append(None)
            log.warning("the event loop has not run for %.1f s; it is at:\n%s", late, where.rstrip())
            return
        cause = stall_cause(accounted_s, spent)
        self.causes.append(cause)
        log.warning("the event loop has not run for %.1f s (%s: over the last %.1f s its thread was on a CPU "
                    "%.0f ms, waiting for one %.0f ms, the process's other threads on a CPU %.0f ms, waiting for "
                    "one %.0f ms; %s):\n%s", late, cause.value, accounted_s, spent.on_cpu * 1000,
                    spent.run_queue * 1000, (spent.process_cpu - spent.on_cpu) * 1000,
                    spent.others_run_queue * 1000, WHAT_THE_STACK_SAYS[cause], where.rstrip())
