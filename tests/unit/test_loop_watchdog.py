"""A blocking call on the event loop is reported with where it blocks, and work on the loop with where it
works, each with its cause, once per stall. (That a loop which turns is not reported is not asserted: on a
crowded machine, as beside the e2e lane, the loop of the test itself may stall for a moment.)"""

from __future__ import annotations

import asyncio
import logging
import os
import time

import pytest
from cpu_work import spins
from dm_broker.app import watch_for_stalls
from dm_broker.config import BrokerConfig
from dm_broker.loop_stalls import StallCause
from dm_broker.loop_watchdog import LoopWatchdog


def sleeps_on_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # the kind of call that must not run on the loop


async def reports_of(block, caplog) -> tuple[LoopWatchdog, list[str]]:
    """A watchdog at 0.3 s while `block` holds the loop for a second, and its reports whose stack is in
    `block`: a crowded machine may stall the loop once more by itself."""
    caplog.set_level(logging.WARNING, logger="dm_broker.loop_watchdog")
    watchdog = LoopWatchdog(threshold_s=0.3, beat_s=0.05)
    watchdog.start()
    try:
        await asyncio.sleep(0.5)
        block(1.0)
        await asyncio.sleep(0.2)
    finally:
        await watchdog.stop()
    return watchdog, [r.getMessage() for r in caplog.records if block.__name__ in r.getMessage()]


@pytest.mark.parametrize(("block", "cause", "meaning"), [
    (sleeps_on_the_loop, StallCause.BLOCKED, "a blocking call, at this stack"),
    (spins, StallCause.BUSY, "work on the loop, at this stack"),
])
async def test_a_stuck_loop_is_reported_once_with_its_stack_and_cause(caplog, block, cause, meaning) -> None:
    watchdog, reports = await reports_of(block, caplog)
    assert len(reports) == 1, "one report per stall"
    assert f"({cause.value}: " in reports[0] and meaning in reports[0], reports[0]
    assert cause in watchdog.causes


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
        assert watchdog.stalls and "sleeps_on_the_loop" in caplog.text
    finally:
        await watchdog.stop()


async def test_where_the_loop_threads_cpu_cannot_be_read_the_stack_comes_without_a_cause(caplog, monkeypatch) -> None:
    """A platform without /proc and without pthread_getcpuclockid (the fault injected: this one has both)."""
    real_open = os.open
    monkeypatch.delattr(time, "pthread_getcpuclockid", raising=False)
    monkeypatch.setattr(os, "open", lambda path, *a, **k: _no_schedstat(path) or real_open(path, *a, **k))
    watchdog, reports = await reports_of(sleeps_on_the_loop, caplog)
    assert len(reports) == 1 and "has not run for" in reports[0] and "(blocked" not in reports[0], reports
    assert watchdog.causes and set(watchdog.causes) == {None}, caplog.text


def _no_schedstat(path) -> None:
    if "schedstat" in str(path):
        raise FileNotFoundError(path)
