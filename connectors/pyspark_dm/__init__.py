"""pyspark_dm: read and write dm topics from Spark as format("dm").

Options and columns are those of Spark's Kafka source and sink. Spark finds `DefaultSource` in
any installed module named pyspark_*; `register(spark)` does the same explicitly. A Python thread other
than the one that built the session calls `use_in_this_thread(spark)` before it writes.
"""

from __future__ import annotations

from .errors import DmSourceError
from .source import DefaultSource, DmDataSource


def register(spark) -> None:  # type: ignore[no-untyped-def]
    """Registers format("dm") with a SparkSession (needed only where auto-discovery is off)."""
    spark.dataSource.register(DmDataSource)


def use_in_this_thread(spark) -> None:  # type: ignore[no-untyped-def]
    """Makes `spark` the active session of the JVM thread that serves the calling Python thread.

    When Spark plans a write (batch or streaming) it finds a Python data source through the JVM thread's
    active session, not through the session the DataFrame belongs to. In PySpark's pinned-thread mode (the
    default) every Python thread has its own JVM thread, and only the one that built the session has it
    active: from any other thread, format("dm") writes fail with DATA_SOURCE_NOT_FOUND while reads work.
    A Spark Connect session has no JVM thread here and needs nothing."""
    jvm, jsession = getattr(spark, "_jvm", None), getattr(spark, "_jsparkSession", None)
    if jvm is not None and jsession is not None:
        jvm.SparkSession.setActiveSession(jsession)


__all__ = ["DefaultSource", "DmDataSource", "DmSourceError", "register", "use_in_this_thread"]
