"""Where decompressing work runs: two threads of their own, never the event loop.

A batch is at most max.message.bytes compressed but up to MAX_DECOMPRESSED_BYTES (32 MiB) inflated, and what a
client sends decides which: checking a producer's records, recompressing them for the topic's codec, finding
a record by timestamp. The codecs release the interpreter while they inflate, the record walks do not; either
way the loop keeps turning. Two threads, not asyncio's default pool of several: each job holds up to one
inflated batch (and a copy), so at most two are in memory at once whatever the clients send, and a client
sending many waits behind its own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

# A batch that inflates to at most this is handled on the loop: the thread hop costs more (50-100 µs).
INLINE_BYTES = 16 * 1024

_executor: ThreadPoolExecutor | None = None


def _inflate_executor() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="dm-inflate")
    return _executor


async def off_loop(fn: Callable[..., T], *args: object) -> T:
    """fn(*args) on one of the two inflating threads."""
    return await asyncio.get_running_loop().run_in_executor(_inflate_executor(), fn, *args)
