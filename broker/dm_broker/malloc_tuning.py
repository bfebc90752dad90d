"""glibc's heap thresholds, fixed at start-up so that request-sized buffers stay in the heap (ADR 0049).

With glibc's dynamic thresholds, several megabyte request buffers alive at once (pipelined produce
requests, a follower's fetch answers) and then freed leave more free memory at the heap's top than
the trim threshold allows; glibc gives it back to the kernel and the next requests fault every page
in again. Whether a broker falls into that depended on its heap's history (even on whether it compiled
its modules at start-up), and it cost about 0.3 µs per 1 KiB record."""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Mapping

log = logging.getLogger(__name__)

# mallopt's parameter numbers, from glibc's malloc.h.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD_BYTES = 16 << 20  # above every buffer of normal work (10 MiB fetch answers)
TRIM_THRESHOLD_BYTES = 64 << 20  # the most freed heap kept rather than given back

ENVIRONMENT_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
TUNABLES = ("glibc.malloc.mmap_threshold", "glibc.malloc.trim_threshold")


def chosen_by_environment(environ: Mapping[str, str]) -> str | None:
    """The setting through which the process's environment already chose a threshold, if any: an
    operator's choice is kept."""
    for name in ENVIRONMENT_SETTINGS:
        if name in environ:
            return name
    tunables = environ.get("GLIBC_TUNABLES", "")
    for name in TUNABLES:
        if name in tunables:
            return f"GLIBC_TUNABLES {name}"
    return None


def is_glibc() -> bool:
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError):  # the name is unknown where the C library is not GNU's
        return False


def tune_malloc(environ: Mapping[str, str] = os.environ) -> str:
    """Fixes both thresholds (fixing either alone turns off glibc's adjustment of both, and with the
    other at its default the broker faults more than before). Returns what was done, for the log."""
    chosen = chosen_by_environment(environ)
    if chosen is not None:
        outcome = f"left to the environment ({chosen})"
    elif not is_glibc():
        outcome = "left alone: the C library is not glibc"
    else:
        libc = ctypes.CDLL(None)
        fixed = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1 and \
            libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
        outcome = (f"mmap threshold {MMAP_THRESHOLD_BYTES >> 20} MiB, trim threshold "
                   f"{TRIM_THRESHOLD_BYTES >> 20} MiB") if fixed else "left alone: glibc refused mallopt"
    log.info("malloc: %s", outcome)
    return outcome
