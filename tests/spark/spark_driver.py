"""A Spark driver in its own process group (Python, its JVM, its Python workers), so a test can
SIGKILL all of it the way a lost driver machine dies. Run as a script it is the driver: a
streaming copy from one topic to another with the exactly-once sink."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


class Driver:
    """A driver process, the file its output goes to (a pipe nobody reads while the test polls would
    stop the driver at its first 64 KiB of log lines) and its checkpoint."""

    def __init__(self, proc: subprocess.Popen, output: Path, checkpoint: Path) -> None:
        self.proc, self.output, self.checkpoint = proc, output, checkpoint

    def tail(self, chars: int = 4000) -> str:
        return self.output.read_text(errors="replace")[-chars:] if self.output.exists() else ""

    def batches_committed(self) -> int:
        """Micro-batches in the checkpoint's commit log: what the driver has finished, this run or before."""
        commits = self.checkpoint / "commits"
        return sum(1 for f in commits.iterdir() if f.name.isdigit()) if commits.is_dir() else 0


def run_copy(bootstrap: str, source: str, target: str, prefix: str, checkpoint: Path,
             available_now: bool) -> Driver:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    output = checkpoint.parent / f"driver-{time.monotonic_ns()}.log"
    with output.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, __file__, bootstrap, source, target, prefix, str(checkpoint), str(available_now)],
            env=env, start_new_session=True, stdout=sink, stderr=subprocess.STDOUT)
    return Driver(proc, output, checkpoint)


# A driver that commits no micro-batch for this long has stalled. Under the e2e suite on this 2-core
# machine a driver's JVM start and first batch took 4.5 min (CI, 2026-11-28) and the next batches 17 s
# each: a limit on progress, not on the whole run.
STALLED_S = 420


def kill_when(driver: Driver, ready: Callable[[], bool], stalled_s: float = STALLED_S) -> None:
    """SIGKILLs the whole driver once `ready()`; fails if it exits first or stalls."""
    def done() -> bool:
        if driver.proc.poll() is not None:
            raise AssertionError(f"the driver exited ({driver.proc.returncode}) early:\n{driver.tail()}")
        return ready()

    _follow(driver, done, stalled_s)
    os.killpg(driver.proc.pid, signal.SIGKILL)
    driver.proc.wait(30)


def wait_for_exit(driver: Driver, stalled_s: float = STALLED_S) -> int:
    """The driver's exit code; fails if it stalls first."""
    _follow(driver, lambda: driver.proc.poll() is not None, stalled_s)
    return driver.proc.returncode


def _follow(driver: Driver, done: Callable[[], bool], stalled_s: float) -> None:
    committed, since = driver.batches_committed(), time.monotonic()
    while not done():
        if (now_committed := driver.batches_committed()) != committed:
            committed, since = now_committed, time.monotonic()
        elif time.monotonic() - since > stalled_s:
            os.killpg(driver.proc.pid, signal.SIGKILL)
            driver.proc.wait(30)
            raise AssertionError(f"the driver committed no batch in {stalled_s:.0f} s (at {committed}); "
                                 f"its output ends:\n{driver.tail()}")
        time.sleep(0.2)


def log_progress(spark) -> None:
    """Each micro-batch's durations (Spark's own breakdown), with times, in the driver's output: what a
    failure's tail shows. (The sink's own lines come from Python workers, warnings only.)"""
    from pyspark.sql.streaming import StreamingQueryListener

    logging.basicConfig(format="%(asctime)s %(name)s %(levelname)s %(message)s")

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event) -> None:
            logging.getLogger("driver").warning("query started")

        def onQueryProgress(self, event) -> None:
            p = event.progress
            logging.getLogger("driver").warning("batch %d: %d rows, durations %s", p.batchId, p.numInputRows,
                                                dict(p.durationMs))

        def onQueryTerminated(self, event) -> None:
            logging.getLogger("driver").warning("query ended: %s", event.exception)

    spark.streams.addListener(Progress())


def main(bootstrap: str, source: str, target: str, prefix: str, checkpoint: str, available_now: str) -> None:
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("dm-eos-copy").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "1g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    log_progress(spark)
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
