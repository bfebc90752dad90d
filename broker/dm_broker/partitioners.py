"""Partition choice where dm picks the partition (the dm CLI): a topic's `partitioner` setting.

- murmur3: keyed records go to murmur3_32(key) mod n (mmh3, unsigned), dm's default.
- murmur2: Kafka's Java default (toPositive(murmur2(key)) mod n), for keys shared with Java producers.
- Keyless records follow `keyless.partitioner`: round_robin (KIP-369 "always round robin") or
  least_loaded (the partition with the fewest records, counting what this producer already sent).
"""

from __future__ import annotations

from collections.abc import Sequence

import mmh3


def murmur3_partition(key: bytes, partitions: int) -> int:
    return mmh3.hash(key, signed=False) % partitions


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), as a signed 32-bit int."""
    length = len(data)
    seed = 0x9747B28C
    m = 0x5BD1E995
    r = 24
    h = (seed ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def murmur2_partition(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class Partitioner:
    """Stateful chooser for one topic (round-robin position, least-loaded counts)."""

    def __init__(self, keyed: str, keyless: str, partitions: int, sizes: Sequence[int] | None = None) -> None:
        if keyed not in ("murmur3", "murmur2", "round_robin", "least_loaded"):
            raise ValueError(f"unknown partitioner {keyed!r}")
        if keyless not in ("round_robin", "least_loaded"):
            raise ValueError(f"unknown keyless partitioner {keyless!r}")
        self.keyed = keyed
        self.keyless = keyless
        self.partitions = partitions
        self.loads = list(sizes) if sizes is not None else [0] * partitions
        self._next = 0  # the round-robin position

    def choose(self, key: bytes | None) -> int:
        if key is not None and self.keyed == "murmur3":
            chosen = murmur3_partition(key, self.partitions)
        elif key is not None and self.keyed == "murmur2":
            chosen = murmur2_partition(key, self.partitions)
        elif (key is None and self.keyless == "least_loaded") or self.keyed == "least_loaded":
            chosen = min(range(self.partitions), key=lambda p: (self.loads[p], p))
        else:
            chosen = self._next % self.partitions
            self._next += 1
        self.loads[chosen] += 1
        return chosen

    def choose_all(self, keys: Sequence[bytes | None]) -> list[int]:
        """`choose` for each of `keys` in turn; a run of keyless records under round robin is counted out
        at once (the REST Proxy's common request: a hundred records with no key)."""
        if self.keyless != "round_robin" or self.keyed == "least_loaded" or any(k is not None for k in keys):
            return [self.choose(k) for k in keys]
        start, n = self._next, self.partitions
        self._next += len(keys)
        chosen = [(start + i) % n for i in range(len(keys))]
        for partition in chosen:
            self.loads[partition] += 1
        return chosen
