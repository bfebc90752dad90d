"""A late event loop is put down to its cause, read from the kernel's own accounting: the loop's own
work, a CPU it had to wait for, another thread holding the interpreter, or a blocking call."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from cpu_work import holds_the_interpreter
from cpu_work import spins as spins_on_the_loop
from dm_broker.loop_stalls import StallCause, ThreadClock, ThreadTimes, stall_cause
from dm_broker.metrics import watch_event_loop
from prometheus_client import CollectorRegistry, Counter, Histogram


@pytest.mark.parametrize(("spent", "cause"), [
    (ThreadTimes(on_cpu=0.25, run_queue=0.0, process_cpu=0.25), StallCause.BUSY),
    (ThreadTimes(on_cpu=0.11, run_queue=0.15, process_cpu=0.11), StallCause.BUSY),  # its own work first
    (ThreadTimes(on_cpu=0.01, run_queue=0.19, process_cpu=0.01), StallCause.RUN_QUEUE),
    (ThreadTimes(on_cpu=0.01, run_queue=0.0, process_cpu=0.23), StallCause.OTHER_THREAD),
    (ThreadTimes(on_cpu=0.01, run_queue=0.02, process_cpu=0.04), StallCause.BLOCKED),
])
def test_the_cause_that_covers_half_the_lateness(spent: ThreadTimes, cause: StallCause) -> None:
    assert stall_cause(0.2, spent) is cause


@pytest.mark.parametrize(("lateness", "spent", "cause"), [
    # CI's crowded run: a 400 ms callback that also waited 534 ms for a CPU is still the callback's stall
    (0.915, ThreadTimes(on_cpu=0.40, run_queue=0.534, process_cpu=0.40), StallCause.BUSY),
    # the loop watchdog's look at a spin on a machine compiling Kubernetes: runnable throughout, half on a CPU
    (0.4, ThreadTimes(on_cpu=0.143, run_queue=0.147, process_cpu=0.144), StallCause.BUSY),
    # the interval's ordinary work beside a long wait for a CPU is not
    (0.7, ThreadTimes(on_cpu=0.12, run_queue=0.55, process_cpu=0.12), StallCause.RUN_QUEUE),
    # nor steps under a stall's worth of CPU that a crowded node stretched (the niced lane on CI): on a node to
    # itself the loop would have been late by 50 ms at most
    (0.2, ThreadTimes(on_cpu=0.05, run_queue=0.14, process_cpu=0.05), StallCause.RUN_QUEUE),
    (0.25, ThreadTimes(on_cpu=0.10, run_queue=0.12, process_cpu=0.10), StallCause.BUSY),
    # a loop asking for the interpreter every 5 ms on a crowded node (the first make test of 2026-12-07)
    (0.6, ThreadTimes(on_cpu=0.005, run_queue=0.35, process_cpu=0.505), StallCause.OTHER_THREAD),
    # the broker's threads creating logs on the other core while the loop waited for its own
    (0.4, ThreadTimes(on_cpu=0.01, run_queue=0.35, process_cpu=0.21), StallCause.RUN_QUEUE),
    # asleep on the interpreter lock while the codec thread holding it waited for a CPU (a niced broker beside
    # the e2e lane, 2026-12-07): the node's CPU, not a blocking call
    (0.3, ThreadTimes(on_cpu=0.004, run_queue=0.01, process_cpu=0.02, others_run_queue=0.25), StallCause.RUN_QUEUE),
    (0.3, ThreadTimes(on_cpu=0.004, run_queue=0.01, process_cpu=0.02, others_run_queue=0.05), StallCause.BLOCKED),
])
def test_causes_on_a_crowded_node(lateness: float, spent: ThreadTimes, cause: StallCause) -> None:
    assert stall_cause(lateness, spent) is cause


def test_the_clock_reads_this_threads_cpu_and_its_wait() -> None:
    clock = ThreadClock()
    try:
        before = clock.read()
        spins_on_the_loop(0.05)
        spent = clock.read().since(before)
    finally:
        clock.close()
    assert 0.04 <= spent.on_cpu <= 1.0
    assert spent.run_queue >= 0.0 and spent.process_cpu >= spent.on_cpu - 0.01


def test_the_clock_sums_the_other_threads_waits_for_a_cpu() -> None:
    """Threads that release the interpreter and outnumber the cores wait in the run queue; the clock of this
    thread sums their waits (the process's pool threads: alive from one read to the next)."""
    import hashlib

    stop = threading.Event()

    def hashes() -> None:
        data = b"x" * (1 << 20)
        while not stop.is_set():
            hashlib.sha256(data).digest()  # releases the interpreter lock for buffers this large

    workers = [threading.Thread(target=hashes) for _ in range(2 * (os.cpu_count() or 1) + 2)]
    clock = ThreadClock()
    try:
        for w in workers:
            w.start()
        time.sleep(0.05)
        before = clock.read()
        time.sleep(0.5)
        spent = clock.read().since(before)
    finally:
        stop.set()
        for w in workers:
            w.join()
        clock.close()
    assert spent.others_run_queue > 0.05, spent


def test_the_clock_reads_another_threads_cpu_from_outside() -> None:
    """The loop watchdog's view: the loop's thread read from the watchdog's."""
    started, stop = threading.Event(), threading.Event()
    ids: list[tuple[int, int]] = []

    def spinner() -> None:
        ids.append((threading.get_ident(), threading.get_native_id()))
        started.set()
        while not stop.is_set():
            pass

    worker = threading.Thread(target=spinner)
    worker.start()
    try:
        started.wait(5)
        clock = ThreadClock(ids[0])
        mine = time.thread_time()
        before = clock.read()
        time.sleep(0.5)
        spent = clock.read().since(before)
        mine = time.thread_time() - mine
        clock.close()
    finally:
        stop.set()
        worker.join()
    # the spinner's CPU (however little a crowded node gave it), not this sleeping thread's
    assert 0.01 <= spent.on_cpu <= 0.6 and spent.on_cpu > 5 * mine, (spent, mine)


def terms_taking(seconds: float) -> int:
    """How many terms holds_the_interpreter sums in about `seconds` on this machine (a fixed count took
    0.26 s on a fast VM, too short for the test to judge)."""
    started = time.thread_time()
    holds_the_interpreter(2_000_000)
    return int(2_000_000 * seconds / max(time.thread_time() - started, 1e-4))


async def stalls_while(block) -> dict[str, float]:
    """Run the probe, stall the loop once with `block`, and return the stall counts by cause."""
    registry = CollectorRegistry()
    lag = Histogram("lag_seconds", "", registry=registry)
    stalls = Counter("stalls", "", ["cause"], registry=registry)
    probe = asyncio.create_task(watch_event_loop(lag, stalls))
    try:
        await asyncio.sleep(0.2)
        block()
        await asyncio.sleep(0.2)
    finally:
        probe.cancel()
    return {cause.value: registry.get_sample_value("stalls_total", {"cause": cause.value}) or 0.0
            for cause in StallCause}


async def test_work_on_the_loop_is_a_busy_stall() -> None:
    counts = await stalls_while(lambda: spins_on_the_loop(0.4))
    # a crowded machine may add a wait for a CPU of its own; nothing else
    assert counts["busy"] == 1 and counts["blocked"] == counts["other_thread"] == 0, counts


async def test_a_blocking_call_on_the_loop_is_a_blocked_stall() -> None:
    counts = await stalls_while(lambda: time.sleep(0.4))
    assert counts["blocked"] == 1 and counts["busy"] == counts["other_thread"] == 0, counts


async def test_a_thread_holding_the_interpreter_is_an_other_thread_stall() -> None:
    def start_holder_and_wait() -> None:
        holder = threading.Thread(target=holds_the_interpreter, args=(terms_taking(0.5),))
        started = time.monotonic()
        holder.start()
        holder.join()
        assert time.monotonic() - started > 0.3, "the call must hold the interpreter long enough to judge"

    counts = await stalls_while(start_holder_and_wait)
    assert counts["other_thread"] >= 1, counts
    assert counts["busy"] == 0, counts


RUN_QUEUE_PROBE = textwrap.dedent("""
    import asyncio, json, os, sys
    from prometheus_client import CollectorRegistry, Counter, Histogram
    from dm_broker.metrics import watch_event_loop

    async def main():
        os.sched_setaffinity(0, {int(sys.argv[2])})  # imported first, then onto the contended CPU
        registry = CollectorRegistry()
        lag = Histogram("lag_seconds", "", registry=registry)
        stalls = Counter("stalls", "", ["cause"], registry=registry)
        probe = asyncio.create_task(watch_event_loop(lag, stalls))
        await asyncio.sleep(0.2)
        print("probing", flush=True)  # the test starts the spinner now
        await asyncio.sleep(float(sys.argv[1]))
        probe.cancel()
        print(json.dumps({s.labels["cause"]: s.value for s in registry.collect() for s in s.samples
                          if s.name == "stalls_total"}))

    asyncio.run(main())
""")

# A real-time spinner: it keeps its CPU from every normal task until it ends, or until the kernel's
# real-time throttling (sched_rt_runtime_us) hands them their 5 %. It ends by itself.
RT_SPINNER = textwrap.dedent("""
    import os, sys, time
    os.sched_setaffinity(0, {int(sys.argv[1])})
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:
        pass
""")


@pytest.mark.skipif(not hasattr(os, "SCHED_FIFO"), reason="needs Linux's CPU affinity and real-time scheduling")
def test_a_loop_that_waits_for_its_cpu_is_a_run_queue_stall() -> None:
    """The probe on one CPU that a real-time process takes for 1.5 s: the probe's thread is runnable and
    waits for the CPU, so its probes are late while it does nothing itself. Nice values would not do it
    reliably: a run beside the e2e lane is niced (run-tests.sh), and a sleeping nice-19 probe woken every
    50 ms often gets the CPU at once. Needs CAP_SYS_NICE."""
    cpu = min(os.sched_getaffinity(0))
    probe = subprocess.Popen([sys.executable, "-c", RUN_QUEUE_PROBE, "4", str(cpu)], stdout=subprocess.PIPE)
    try:
        # on a crowded machine the probe's imports alone may take longer than the spinner runs
        assert probe.stdout is not None and probe.stdout.readline() == b"probing\n"
        spinner = subprocess.run([sys.executable, "-c", RT_SPINNER, str(cpu), "1.5"], capture_output=True,
                                 timeout=60)
        if spinner.returncode != 0:
            pytest.skip(f"cannot run a real-time process here (no CAP_SYS_NICE?): {spinner.stderr.decode()[-200:]}")
        out, _ = probe.communicate(timeout=60)
    finally:
        probe.kill()
        probe.wait()
    counts = {cause.value: 0.0 for cause in StallCause} | json.loads(out)
    assert counts["run_queue"] >= 1, counts
    assert counts["run_queue"] > counts["busy"] + counts["blocked"] + counts["other_thread"], counts
