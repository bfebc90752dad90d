"""Reports an event loop that stopped turning: a blocking call on it holds up every request the
process serves (a probe that times out, heartbeats that stop). A thread notices that the loop's
heartbeat is late and logs where the loop is stuck, once per stall."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback

log = logging.getLogger(__name__)


class LoopWatchdog:
    def __init__(self, threshold_s: float = 2.0, beat_s: float = 0.25) -> None:
        self.threshold_s = threshold_s
        self.beat_s = beat_s
        self.stalls: list[float] = []  # how long each reported stall had lasted when it was noticed
        self._last_beat = 0.0  # set by start(), on the loop's thread
        self._loop_thread = 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="loop-watchdog", daemon=True)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """From the loop's thread."""
        self._loop_thread = threading.get_ident()
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
        reported = False
        while not self._stopped.wait(self.beat_s):
            late = time.monotonic() - self._last_beat
            if late < self.threshold_s:
                reported = False
            elif not reported:
                reported = True
                self.stalls.append(late)
                frame = sys._current_frames().get(self._loop_thread)
                where = "".join(traceback.format_stack(frame)) if frame is not None else "(unknown)\n"
                log.warning("the event loop has not run for %.1f s; it is at:\n%s", late, where.rstrip())
