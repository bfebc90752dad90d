"""The cyclic garbage collector and a process's long-lived objects (ADR 0040).

CPython's collector stops the event loop for as long as a collection takes, and a collection of the
oldest generation visits every object that generation holds. A broker's partitions are such objects:
at 10,000 partitions (a third of them per broker) the oldest generation held about 540,000 objects,
and its collections took 0.3-0.46 s on the benchmark's machine, a young one that met a burst of new
partitions 0.2 s (issue 31: the loop's only stalls over 100 ms left). `gc.freeze` moves every tracked
object into a generation no collection visits, in constant time; objects moved there are still freed
as soon as nothing refers to them (reference counting does not depend on the collector); only garbage
held in reference cycles among frozen objects is never collected. So this is done when many long-lived
objects have just been made, not on a timer: at start-up after recovery (before serving), after a broker's metadata
step that hosted new partitions, and when the controller's partition count grew (checked each second,
an O(topics) sum). A retired partition holds no reference cycle (test_gc_tuning checks it with the
collector off), so it is freed when retired, frozen or not. A whole cluster's controller that an operator
stops hosting does hold cycles, so the operator hands it to one full collection (`release`). The young
generation of 50,000 allocations matters for what is frozen: the operator's API client makes many short
cycles, and they die in the young collection before a freeze (with Python's 700, 18,000-27,000 of them
had been promoted and were frozen)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable

YOUNG_COLLECTION_ALLOCATIONS = 50_000


def tune_gc() -> None:
    """At start-up, once recovery is done and before the process serves. Request handling allocates
    many short-lived objects; with the default thresholds the collector runs every few requests and
    its pauses show in tail latency. What is alive after start-up is collected once and moved out of
    its way, and young collections happen less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_ALLOCATIONS, 20, 20)


class LongLivedObjects:
    """Freezes what a step of work left alive when that step made long-lived objects (`count`, e.g.
    the partitions hosted, grew), so the next collections of the old generations need not visit them."""

    def __init__(self, count: int) -> None:
        self._count = count
        self.freezes = 0
        self.releases = 0

    def settle(self, count: int) -> bool:
        """Freezes if `count` grew since the last call; says whether it did."""
        grew, self._count = count > self._count, count
        if grew:
            # A young collection first, so the step's own short-lived cycles are not kept for good;
            # it visits only the youngest generation (at most YOUNG_COLLECTION_ALLOCATIONS objects).
            gc.collect(0)
            gc.freeze()
            self.freezes += 1
        return grew

    def release(self) -> None:
        """Many long-lived objects were let go of, and they may hold reference cycles that only the collector
        frees (a cluster's controller an operator stopped hosting is one). Frozen, such a cycle would never
        be freed. So everything goes back to the collector for one full collection, and what is still alive
        is frozen again: a full pause, at a rare event, instead of one for every collection of the oldest
        generation."""
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.releases += 1


async def freeze_as_it_grows(count: Callable[[], int], every_s: float = 1.0,
                             long_lived: LongLivedObjects | None = None) -> None:
    """For a process whose long-lived objects grow in handlers rather than in one place (the
    controller's topics): settles once a second, freezing only after `count` grew."""
    long_lived = LongLivedObjects(count()) if long_lived is None else long_lived
    while True:
        await asyncio.sleep(every_s)
        long_lived.settle(count())
