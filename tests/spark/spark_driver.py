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


def run_copy(bootstrap: str, source: str, target: str, prefix: str, checkpoint: Path,
             available_now: bool) -> subprocess.Popen:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    return subprocess.Popen(
        [sys.executable, __file__, bootstrap, source, target, prefix, str(checkpoint), str(available_now)],
        env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def kill_when(proc: subprocess.Popen, ready: Callable[[], bool], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            raise AssertionError(f"the driver exited ({proc.returncode}) early:\n"
                                 + (proc.stdout.read().decode(errors="replace")[-4000:] if proc.stdout else ""))
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError("the driver did not get far enough in time")
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
