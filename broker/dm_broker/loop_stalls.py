"""Why the event loop was late: its own work, the CPU it waited for, another thread, or a blocking call.

A late loop probe says that every request waited, not why. The cure differs with the cause: work on
the loop that grows with the partition count must be cut into pieces (ADR 0039); a loop that waited
for a CPU means the node has more runnable processes than cores; another thread on the CPU while the
loop was off it is a worker holding the interpreter lock; a loop neither on the CPU nor waiting for one
made a blocking call (a file system, a page fault on a cold mapping, a throttled cgroup). The kernel
keeps, per thread, the time it spent on a CPU and waiting in the run queue
(/proc/thread-self/schedstat), and the process's CPU time covers its other threads; read at both ends
of a probe, they tell the causes apart.

One wait looks like a blocking call and is not: the loop's thread asleep on the interpreter lock while the
thread holding it (the codec thread, in the middle of a request's frame) waits for a CPU. Off the CPU and
out of the run queue, the loop's thread shows neither; the holder's run-queue wait does, so the other
threads' waits are read too, and such a stall is the node's lack of CPU (run_queue), not the broker's.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

STALL_SECONDS = 0.1  # a probe later than this is a stall (issue 31's bound)


class StallCause(StrEnum):
    BUSY = "busy"  # the loop's own thread was on a CPU: work on the loop
    RUN_QUEUE = "run_queue"  # runnable, waiting for a CPU the node did not have free
    OTHER_THREAD = "other_thread"  # off the CPU while another thread of the process was on one
    BLOCKED = "blocked"  # off the CPU and not waiting for one: a blocking call


@dataclass(frozen=True, slots=True)
class ThreadTimes:
    """Cumulative seconds, as the kernel counts them for the loop's thread and its process."""

    on_cpu: float
    run_queue: float
    process_cpu: float
    others_run_queue: float = 0.0  # the process's other threads' waits for a CPU, summed

    def since(self, earlier: ThreadTimes) -> ThreadTimes:
        return ThreadTimes(self.on_cpu - earlier.on_cpu, self.run_queue - earlier.run_queue,
                           self.process_cpu - earlier.process_cpu, self.others_run_queue - earlier.others_run_queue)


def stall_cause(lateness_s: float, spent: ThreadTimes) -> StallCause:
    """What the lateness of one probe is put down to, from what the thread and process spent over the
    probe's whole interval (its ordinary work counts too, so only a late probe is judged).

    The loop's own work first: its thread on a CPU for half the lateness, or runnable for half (on a CPU or
    waiting for one) and on a CPU for a quarter of that or more — a CPU-bound callback on a crowded node
    shares the cores with its neighbours, and it is the callback that must be cut up — but only if that CPU
    time alone is a stall's worth (STALL_SECONDS): on a node to itself the loop would have been late by no
    more than it, so a 40 ms step that a crowded node stretched to 600 ms is the node's lack of CPU (a
    broker niced beside the e2e lane on CI, where a tenth of a core stretched every step tenfold). Then the larger of
    the wait for a CPU and the other threads' CPU, if it covers half: a loop waiting for the interpreter
    lock wakes every 5 ms to ask for it, and on a crowded node each wake-up waits for a CPU too, so both
    grow while another thread holds the interpreter. Then the other threads' wait for a CPU, if it covers
    half: the loop slept on the interpreter lock of a thread that waited for a CPU. Else a blocking call."""
    half = lateness_s / 2
    other_threads = spent.process_cpu - spent.on_cpu
    if spent.on_cpu >= half or (spent.on_cpu + spent.run_queue >= half and spent.on_cpu * 3 >= spent.run_queue
                                and spent.on_cpu >= STALL_SECONDS):
        return StallCause.BUSY
    if max(spent.run_queue, other_threads) >= half:
        return StallCause.RUN_QUEUE if spent.run_queue >= other_threads else StallCause.OTHER_THREAD
    if spent.others_run_queue >= half:
        return StallCause.RUN_QUEUE
    return StallCause.BLOCKED


class ThreadClock:
    """Reads one thread's times: the calling thread's, or the thread whose `threading` ident and native id
    are given (the loop watchdog reads the loop's thread from its own). Linux gives the run-queue wait;
    elsewhere it reads as 0 and the thread's CPU comes from its CPU clock; `readable` is False where
    another thread's CPU cannot be read at all."""

    def __init__(self, thread: tuple[int, int] | None = None) -> None:
        """`thread`: (threading.get_ident(), threading.get_native_id()) of another thread; None for the
        calling one, then create and read it on that thread."""
        self._cpu_time: Callable[[], float] | None = time.thread_time
        if thread is not None:  # pthread_getcpuclockid is not on every platform
            getclock = getattr(time, "pthread_getcpuclockid", None)
            self._cpu_time = None if getclock is None else functools.partial(time.clock_gettime, getclock(thread[0]))
        path = "/proc/thread-self/schedstat" if thread is None else f"/proc/self/task/{thread[1]}/schedstat"
        self._others = OtherThreadsWaits(threading.get_native_id() if thread is None else thread[1])
        try:
            self._fd: int | None = os.open(path, os.O_RDONLY)
        except OSError:
            self._fd = None

    @property
    def readable(self) -> bool:
        return self._fd is not None or self._cpu_time is not None

    def read(self) -> ThreadTimes:
        process_cpu = time.process_time()
        if self._fd is not None:
            try:
                on_cpu_ns, waiting_ns = os.pread(self._fd, 128, 0).split()[:2]
                return ThreadTimes(int(on_cpu_ns) / 1e9, int(waiting_ns) / 1e9, process_cpu,
                                   self._others.waited())
            except (OSError, ValueError):
                self.close()
        return ThreadTimes(self._cpu_time() if self._cpu_time is not None else 0.0, 0.0, process_cpu)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._others.close()


class OtherThreadsWaits:
    """The run-queue waits of the process's threads but one, summed. A thread counts from the first read that
    sees it (the pools' threads live from one read to the next), and what it had waited when last read stays
    in the sum after it ends, so the sum only grows. Each thread's file stays open while it lives; the list
    of threads is read again at each call (a directory of a few entries)."""

    def __init__(self, skip_native_id: int) -> None:
        self._skip = str(skip_native_id)
        self._fds: dict[str, int] = {}
        self._last: dict[str, float] = {}
        self._total = 0.0

    def waited(self) -> float:
        try:
            alive = set(os.listdir("/proc/self/task"))
        except OSError:
            return self._total
        alive.discard(self._skip)
        for tid in [t for t in self._fds if t not in alive]:
            os.close(self._fds.pop(tid))
            self._last.pop(tid, None)
        for tid in alive:
            fd = self._fds.get(tid)
            try:
                if fd is None:
                    fd = self._fds[tid] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
                waited = int(os.pread(fd, 128, 0).split()[1]) / 1e9
            except (OSError, ValueError, IndexError):
                continue
            self._total += waited - self._last.get(tid, 0.0)  # a new thread: all it waited, since it started
            self._last[tid] = waited
        return self._total

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
