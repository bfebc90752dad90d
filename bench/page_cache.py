"""How fast can this machine put new data into the page cache — cold, then with warmed memory?

    .venv/bin/python -m bench.page_cache [--gigabytes 1] [--dir /tmp]

Every log append writes into fresh page-cache pages. On a VM whose balloon driver reports free
pages to the host (Firecracker, virtio-balloon free page reporting), the host discards them, and
the first write to each page the guest kernel hands out again is a host page fault. This writes
the same amount of data in 1 MiB pwrite calls twice: first as it comes, then right after
touching memory (bench.brokers.warm_memory); a large gap means the replication benchmark's
numbers depend on the VM's memory state as much as on dm (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from .brokers import warm_memory

CHUNK = 1 << 20


def write_rate(directory: str, total: int) -> float:
    """MB/s of 1 MiB pwrites into a new file (CPU-bound: nothing is fsynced)."""
    data = os.urandom(CHUNK)
    fd, path = tempfile.mkstemp(dir=directory, prefix="dm-pagecache-")
    try:
        started = time.perf_counter()
        for offset in range(0, total, CHUNK):
            os.pwrite(fd, data, offset)
        return total / (time.perf_counter() - started) / 1e6
    finally:
        os.close(fd)
        os.unlink(path)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gigabytes", type=float, default=1)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    total = int(args.gigabytes * (1 << 30))
    cold = write_rate(args.dir, total)
    warm_memory(args.gigabytes * 2)
    warm = write_rate(args.dir, total)
    print(f"page-cache writes in {args.dir}: cold {cold:,.0f} MB/s, after warming memory {warm:,.0f} MB/s")


if __name__ == "__main__":
    main()
