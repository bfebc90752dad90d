"""Background-task plumbing shared by the broker's components."""

from __future__ import annotations

import asyncio
import contextlib


async def stop_tasks(*tasks: asyncio.Task | None) -> None:
    """Cancels background tasks and waits until they are gone. A task that had already failed
    does not stop the shutdown (its failure was logged where it happened)."""
    live = [t for t in tasks if t is not None]
    for task in live:
        task.cancel()
    for task in live:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
