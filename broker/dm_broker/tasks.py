"""Background-task plumbing shared by the broker's components."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging

log = logging.getLogger(__name__)

STOP_WAIT_S = 5.0


async def stop_tasks(*tasks: asyncio.Task | None, wait_s: float = STOP_WAIT_S) -> None:
    """Cancels background tasks and waits until they are gone, at most `wait_s`. A task that had
    already failed does not stop the shutdown (its failure was logged where it happened), and
    neither does one that ignores its cancellation: the shutdown still has logs to flush, so it
    goes on and says where that task was stuck."""
    live = [t for t in tasks if t is not None and not t.done()]
    for task in live:
        task.cancel()
    if live:
        _, stuck = await asyncio.wait(live, timeout=wait_s)
        for task in stuck:
            log.error("task %s did not stop within %.1fs of its cancellation; going on without it:\n%s",
                      task.get_name(), wait_s, task_stack(task))
    for task in tasks:
        if task is not None and task.done():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                task.result()  # retrieved, so asyncio does not report it again at exit


def task_stack(task: asyncio.Task) -> str:
    out = io.StringIO()
    task.print_stack(file=out)
    return out.getvalue()


def cancelling() -> bool:
    """Whether the current task has been asked to stop. A library that turns a cancellation into
    an error of its own (a timeout, a closed connection) would otherwise keep a retry loop
    running through a shutdown."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
