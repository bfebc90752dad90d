"""A Spark driver in its own process group (Python, its JVM, its Python workers), so a test can
SIGKILL all of it the way a lost driver machine dies. Run as a script it is the driver: a
streaming copy from one topic to another with the exactly-once sink."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


class Driver:
    """A driver process and the file its output goes to: a pipe nobody reads while the test polls would
    stop the driver at its first 64 KiB of log lines."""

    def __init__(self, proc: subprocess.Popen, output: Path) -> None:
        self.proc, self.output = proc, output

    def tail(self, chars: int = 4000) -> str:
        return self.output.read_text(errors="replace")[-chars:] if self.output.exists() else ""


def run_copy(bootstrap: str, source: str, target: str, prefix: str, checkpoint: Path,
             available_now: bool) -> Driver:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    output = checkpoint.parent / f"driver-{time.monotonic_ns()}.log"
    with output.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, __file__, bootstrap, source, target, prefix, str(checkpoint), str(available_now)],
            env=env, start_new_session=True, stdout=sink, stderr=subprocess.STDOUT)
    return Driver(proc, output)


def kill_when(driver: Driver, ready: Callable[[], bool], timeout: float = 300) -> None:
    """SIGKILLs the whole driver once `ready()`. `timeout` covers a JVM start and the first batches on a
    2-core machine that also runs the e2e suite (180 s ran out there, twice, 2026-11-28)."""
    deadline = time.monotonic() + timeout
    proc = driver.proc
    while not ready():
        if proc.poll() is not None:
            raise AssertionError(f"the driver exited ({proc.returncode}) early:\n{driver.tail()}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
            raise AssertionError(f"the driver did not get far enough in {timeout:.0f} s; its output ends:\n"
                                 f"{driver.tail()}")
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def main(bootstrap: str, source: str, target: str, prefix: str, checkpoint: str, available_now: str) -> None:
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("dm-eos-copy").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "1g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    stream = (spark.readStream.format("dm").option("kafka.bootstrap.servers", bootstrap).option("subscribe", source)
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "300").load())
    writer = (stream.select("value").writeStream.format("dm").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", target).option("deliveryGuarantee", "exactly-once")
              .option("transactionalIdPrefix", prefix).option("checkpointLocation", checkpoint))
    if available_now == "True":
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        if query.exception() is not None:
            raise SystemExit(f"the query failed: {query.exception()}")
    else:
        writer.trigger(processingTime="100 milliseconds").start().awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:])
