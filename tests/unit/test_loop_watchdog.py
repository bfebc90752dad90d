"""A blocking call on the event loop is reported with where it blocks; a loop that turns is not."""

from __future__ import annotations

import asyncio
import logging
import time

from dm_broker.loop_watchdog import LoopWatchdog


def sleeps_on_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # the kind of call that must not run on the loop


async def test_a_blocked_loop_is_reported_with_its_stack(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="dm_broker.loop_watchdog")
    watchdog = LoopWatchdog(threshold_s=0.3, beat_s=0.05)
    watchdog.start()
    try:
        await asyncio.sleep(0.5)
        assert watchdog.stalls == []
        sleeps_on_the_loop(1.0)
        await asyncio.sleep(0.2)
        assert len(watchdog.stalls) == 1, "one report per stall"
        assert "sleeps_on_the_loop" in caplog.text
    finally:
        await watchdog.stop()
