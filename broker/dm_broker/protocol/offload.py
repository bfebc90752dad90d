"""The codec thread: checking and parsing a large request, and encoding a large answer, off the event loop.

What a request costs grows with its elements, and most of it is Python that walks them: the bounds walk
before kio parses a body (about 1.5 µs an element) and kio's writer for the answer (about 5 µs an element;
20,000 partitions of a ListOffsets answer took 78 ms, of a DescribeConfigs answer 268 ms). Done on the
loop, one such request stalls every connection of the broker. Done here, the loop thread takes the
interpreter back at each switch interval (5 ms), so the loop keeps turning while the work goes on.

One thread: requests big enough to come here queue behind each other rather than take more of the CPU,
so a client sending many of them slows itself first. The thread's CPU time is given back to the caller,
which charges it to the principal's request_percentage quota as Kafka charges its I/O threads' time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

# A frame larger than this is checked and parsed on the codec thread (about 5,000 partition entries).
LARGE_FRAME_BYTES = 64 * 1024
# An answer to a request with more elements than this is encoded on the codec thread (about 5 ms on the loop).
LARGE_ANSWER_ELEMENTS = 1000

_executor: ThreadPoolExecutor | None = None


def _codec_executor() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dm-codec")
    return _executor


def _timed(fn: Callable[..., T], args: tuple) -> tuple[T, float]:
    started = time.thread_time()
    result = fn(*args)
    return result, time.thread_time() - started


async def on_codec_thread(fn: Callable[..., T], *args: object) -> tuple[T, float]:
    """fn(*args) on the codec thread; its result and the CPU seconds it took there."""
    return await asyncio.get_running_loop().run_in_executor(_codec_executor(), _timed, fn, args)
