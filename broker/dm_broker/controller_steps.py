"""Asking the controller about many partitions a step at a time (ADR 0039's step, issue 65)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .controller.models import PartitionResult
from .errors import KafkaError
from .steps import PARTITIONS_PER_STEP

T = TypeVar("T")


async def asked_in_steps(items: list[T] | None, ask: Callable[[list[T] | None], Awaitable[list[PartitionResult]]],
                         guard: Callable[[Awaitable[list[PartitionResult]]], Awaitable[list[PartitionResult]]]
                         ) -> list[PartitionResult]:
    """`guard(ask(part))` for PARTITIONS_PER_STEP items at a time (`guard` maps the controller's errors to Kafka's),
    the loop getting its turn between: the embedded controller's pass over 20,000 partitions (and their results'
    models) in one go held the loop 60 ms and more. `items` None (every partition) is one call. A KafkaError
    before any part was asked refuses the whole request as before; after, it is the answer of the items not yet
    asked (those before it are done). Items are (topic, partition) pairs or have `.topic` and `.partition`."""
    if items is None:
        return await guard(ask(None))
    results: list[PartitionResult] = []
    for first in range(0, len(items), PARTITIONS_PER_STEP):
        if first:
            await asyncio.sleep(0)
        try:
            results += await guard(ask(items[first:first + PARTITIONS_PER_STEP]))
        except KafkaError as exc:
            if first == 0:
                raise
            results += [PartitionResult(topic=topic, partition=index, error=exc.code.name, message=exc.message)
                        for topic, index in map(_named, items[first:])]
            break
    return results


def _named(item: Any) -> tuple[str, int]:
    return item if isinstance(item, tuple) else (item.topic, item.partition)
