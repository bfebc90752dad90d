"""glibc's heap thresholds (ADR 0049): with glibc's dynamic thresholds, megabyte buffers alive together
and then freed are given back to the kernel and fault in again on the next burst; fixed at start-up,
they stay in the heap. Each case runs in a fresh interpreter, whose heap has no history."""

from __future__ import annotations

import subprocess
import sys

import pytest
from dm_broker.malloc_tuning import chosen_by_environment, is_glibc, tune_malloc

glibc_only = pytest.mark.skipif(not is_glibc(), reason="mallopt is glibc's")

BURSTS = """
import resource, sys
from dm_broker.malloc_tuning import tune_malloc
if sys.argv[1] == "tuned":
    print(tune_malloc({}), file=sys.stderr)
def burst():  # four request buffers of 1 MiB alive at once, as under produce pipelining
    held = [bytearray(1 << 20) for _ in range(4)]
    del held
for _ in range(5):
    burst()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    burst()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 200)
"""


def faults_per_mib(mode: str) -> float:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}
    done = subprocess.run([sys.executable, "-c", BURSTS, mode], capture_output=True, text=True, env=env,
                          timeout=60, check=True)
    return float(done.stdout)


@glibc_only
def test_fixed_thresholds_keep_freed_request_buffers_in_the_heap() -> None:
    # glibc's defaults give the freed 4 MiB back each time: measured 248 of 256 pages per MiB.
    assert faults_per_mib("default") > 100
    assert faults_per_mib("tuned") < 5


@glibc_only
def test_tuning_reports_what_it_set() -> None:
    done = subprocess.run([sys.executable, "-c", "from dm_broker.malloc_tuning import tune_malloc; "
                           "print(tune_malloc({}))"], capture_output=True, text=True, timeout=60, check=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)})
    assert done.stdout.strip() == "mmap threshold 16 MiB, trim threshold 64 MiB"


@pytest.mark.parametrize("environ, chosen", [
    ({}, None),
    ({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"}, None),
    ({"MALLOC_TRIM_THRESHOLD_": "131072"}, "MALLOC_TRIM_THRESHOLD_"),
    ({"MALLOC_MMAP_THRESHOLD_": "131072"}, "MALLOC_MMAP_THRESHOLD_"),
    ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=1"},
     "GLIBC_TUNABLES glibc.malloc.trim_threshold"),
])
def test_an_operators_choice_in_the_environment_is_kept(environ: dict[str, str], chosen: str | None) -> None:
    assert chosen_by_environment(environ) == chosen
    if chosen is not None:  # nothing is set: this process's heap is left as it was
        assert tune_malloc(environ) == f"left to the environment ({chosen})"
