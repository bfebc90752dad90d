"""The topic's `compression.type`: a leader stores batches with the topic's codec, recompressing those
a producer sent otherwise (Kafka's LogValidator does the same; `producer` keeps what came).

Only the records' bytes are re-encoded: offsets, timestamps, producer id, epoch and sequence stay, so
idempotence and transactions see the same batch. Large batches are recompressed in a worker thread
(log/inflate.py), small ones inline (a thread hop costs more than they do)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import inflate
from .records import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    compress,
    decompress,
    parse_header,
    with_payload,
)

CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
INLINE_BELOW = inflate.INLINE_BYTES


def target(settings) -> tuple[int, int | None] | None:
    """(codec, level) batches of this topic are stored with, or None to keep the producer's."""
    name = settings["compression.type"]
    if name == "producer":
        return None
    codec = CODECS[name]
    level = {1: settings["compression.gzip.level"], 3: settings["compression.lz4.level"],
             4: settings["compression.zstd.level"]}.get(codec)
    return codec, None if level == -1 else level


def recompress_batch(batch: bytes | bytearray | memoryview, codec: int, level: int | None) -> bytes:
    header = parse_header(batch)
    raw = decompress(header.compression, bytes(memoryview(batch)[HEADER_SIZE:header.size]))
    attributes = (header.attributes & ~COMPRESSION_MASK) | codec
    return with_payload(header, compress(codec, raw, level), attributes, header.records_count)


async def rewritten(rewrite: Callable[..., bytes], batch: bytes | bytearray | memoryview, inflated: int,
                    *args: Any) -> bytes:
    """`rewrite(batch, *args)` (a producer's batch re-encoded: recompressed, renumbered) inline when the batch
    is small, since a thread hop costs more, and on an inflating thread otherwise. Small is judged by what
    the batch inflates to (`inflated`, from its check), not its compressed size: a 3.9 KB zstd batch of 120 MiB
    was recompressed for a gzip topic on the loop, 866 ms (issue 65)."""
    if max(len(batch), inflated) < INLINE_BELOW:
        return rewrite(batch, *args)
    return await inflate.off_loop(rewrite, bytes(batch), *args)


async def recompress(batch: bytes | bytearray | memoryview, inflated: int, codec: int, level: int | None) -> bytes:
    return await rewritten(recompress_batch, batch, inflated, codec, level)
