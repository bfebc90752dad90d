"""Counts the turns other tasks get on the event loop while a piece of work runs: the check that work which
grows with the partition count comes in steps (ADR 0039) rather than as one callback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager


class Turns:
    count = 0


@asynccontextmanager
async def counting_turns(on_first: Callable[[], None] | None = None) -> AsyncIterator[Turns]:
    """Inside the block, `turns.count` is how often another task ran; `on_first` runs at the first turn."""
    turns = Turns()

    async def count() -> None:
        while True:
            await asyncio.sleep(0)
            turns.count += 1
            if turns.count == 1 and on_first is not None:
                on_first()

    task = asyncio.create_task(count())
    await asyncio.sleep(0)  # the counter is waiting for its first turn
    try:
        yield turns
    finally:
        task.cancel()
