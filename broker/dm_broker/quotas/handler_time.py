"""How long a request's handler ran on the event loop, not counting the time it waited (the measure
behind `request_percentage`): the handler's coroutine is driven step by step and each step timed."""

from __future__ import annotations

import time
from collections.abc import Coroutine, Generator
from typing import Any


class TimedCoroutine:
    __slots__ = ("_coro", "seconds")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro
        self.seconds = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._coro
        value: Any = None
        error: BaseException | None = None
        while True:
            started = time.perf_counter()
            try:
                yielded = coro.throw(error) if error is not None else coro.send(value)
            except StopIteration as stop:
                self.seconds += time.perf_counter() - started
                return stop.value
            except BaseException:
                self.seconds += time.perf_counter() - started
                raise
            self.seconds += time.perf_counter() - started
            try:
                value, error = (yield yielded), None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # cancellation and the like go on into the handler
                value, error = None, exc
