"""A blocking call on the event loop is reported with where it blocks, and work on the loop with where it
works, each with its cause; a loop that turns is not reported."""

from __future__ import annotations

import asyncio
import logging
import time

from cpu_work import spins
from dm_broker.app import watch_for_stalls
from dm_broker.config import BrokerConfig
from dm_broker.loop_stalls import StallCause
from dm_broker.loop_watchdog import LoopWatchdog


def sleeps_on_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # the kind of call that must not run on the loop


def works_on_the_loop(seconds: float) -> None:
    spins(seconds)


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
        assert watchdog.causes == [StallCause.BLOCKED] and "(blocked: " in caplog.text
    finally:
        await watchdog.stop()


async def test_work_on_the_loop_is_reported_busy_with_its_stack(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="dm_broker.loop_watchdog")
    watchdog = LoopWatchdog(threshold_s=0.3, beat_s=0.05)
    watchdog.start()
    try:
        await asyncio.sleep(0.2)
        works_on_the_loop(1.0)
        await asyncio.sleep(0.2)
        assert watchdog.causes == [StallCause.BUSY], caplog.text
        assert "works_on_the_loop" in caplog.text and "work on the loop, at this stack" in caplog.text
    finally:
        await watchdog.stop()


async def test_brokers_and_controllers_watch_their_loop_as_configured(caplog) -> None:
    """event.loop.stall.report.ms: what `dm broker` and `dm controller` start (0 starts nothing)."""
    assert watch_for_stalls(BrokerConfig.build({"event.loop.stall.report.ms": "0"}, environ={})) is None
    caplog.set_level(logging.WARNING, logger="dm_broker.loop_watchdog")
    watchdog = watch_for_stalls(BrokerConfig.build({"event.loop.stall.report.ms": "200"}, environ={}))
    assert watchdog is not None
    try:
        await asyncio.sleep(0.1)
        sleeps_on_the_loop(0.6)
        await asyncio.sleep(0.1)
        assert len(watchdog.stalls) == 1 and "sleeps_on_the_loop" in caplog.text
    finally:
        await watchdog.stop()
