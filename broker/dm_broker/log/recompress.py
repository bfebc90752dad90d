"""The topic's `compression.type`: a leader stores batches with the topic's codec, recompressing those
a producer sent otherwise (Kafka's LogValidator does the same; `producer` keeps what came).

Only the records' bytes are re-encoded: offsets, timestamps, producer id, epoch and sequence stay, so
idempotence and transactions see the same batch. Large batches are recompressed in a worker thread
(the codecs release the GIL), small ones inline (a thread hop costs more than they do)."""

from __future__ import annotations

import asyncio
import struct

import crc32c

from .records import (
    BATCH_HEADER,
    COMPRESSION_MASK,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    compress,
    decompress,
    parse_header,
)

CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
INLINE_BELOW = 16 * 1024


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
    payload = compress(codec, raw, level)
    attributes = (header.attributes & ~COMPRESSION_MASK) | codec
    out = bytearray(BATCH_HEADER.pack(
        header.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(payload), header.partition_leader_epoch,
        header.magic, 0, attributes, header.last_offset_delta, header.base_timestamp, header.max_timestamp,
        header.producer_id, header.producer_epoch, header.base_sequence, header.records_count))
    out += payload
    struct.pack_into(">I", out, 17, crc32c.crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


async def recompress(batch: bytes | bytearray | memoryview, codec: int, level: int | None) -> bytes:
    if len(batch) < INLINE_BELOW:
        return recompress_batch(batch, codec, level)
    return await asyncio.to_thread(recompress_batch, bytes(batch), codec, level)
