"""Shutdown must not hang on a background task: one that ignores its cancellation is given up on
(with its stack logged), and a library turning a cancellation into an error of its own does not
keep a controller retry loop alive."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest
from dm_broker.controller.client import ControllerUnavailable, HttpControllerClient
from dm_broker.controller.models import HeartbeatRequest
from dm_broker.tasks import stop_tasks


async def test_a_task_that_ignores_cancellation_is_given_up_on_and_its_stack_logged(caplog):
    released = asyncio.Event()

    async def stubborn() -> None:
        while not released.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(3600)

    async def obedient() -> None:
        await asyncio.sleep(3600)

    caplog.set_level(logging.ERROR, logger="dm_broker.tasks")
    hung = asyncio.create_task(stubborn(), name="stubborn-loop")
    fine = asyncio.create_task(obedient(), name="obedient-loop")
    await asyncio.sleep(0)
    await asyncio.wait_for(stop_tasks(hung, fine, None, wait_s=0.2), 30)
    assert fine.cancelled()
    assert not hung.done()
    assert "stubborn-loop did not stop" in caplog.text and "in stubborn" in caplog.text
    assert "obedient-loop" not in caplog.text
    released.set()
    hung.cancel()
    await hung


class _CancelBecomesTimeout:
    """What a client library's timeout context did on a race with a cancellation: the
    CancelledError comes out as its own TimeoutError (the fault a real server cannot produce)."""

    def __init__(self, started: asyncio.Event) -> None:
        self.started = started

    def request(self, *args, **kwargs) -> _CancelBecomesTimeout:
        return self

    async def __aenter__(self) -> None:
        self.started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise TimeoutError from None

    async def __aexit__(self, *exc) -> None:
        return None


async def test_a_retry_loop_stops_when_a_library_turns_its_cancellation_into_a_timeout():
    client = HttpControllerClient("http://127.0.0.1:9")
    started = asyncio.Event()
    client._sess = lambda: _CancelBecomesTimeout(started)  # type: ignore[method-assign]
    retries = 0

    async def heartbeat_loop() -> None:
        nonlocal retries
        while True:
            try:
                await client.heartbeat(HeartbeatRequest(node_id=0, broker_epoch=1))
            except ControllerUnavailable:
                retries += 1
                await asyncio.sleep(0.01)

    task = asyncio.create_task(heartbeat_loop())
    await asyncio.wait_for(started.wait(), 10)
    await asyncio.wait_for(stop_tasks(task, wait_s=10), 30)
    assert task.cancelled() and retries == 0


class _TimesOut(_CancelBecomesTimeout):
    async def __aenter__(self) -> None:
        raise TimeoutError


async def test_without_a_cancellation_a_timeout_is_still_an_unavailable_controller():
    client = HttpControllerClient("http://127.0.0.1:9")
    client._sess = lambda: _TimesOut(asyncio.Event())  # type: ignore[method-assign]
    with pytest.raises(ControllerUnavailable):
        await client.heartbeat(HeartbeatRequest(node_id=0, broker_epoch=1))
