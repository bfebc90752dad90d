"""pyspark_dm: read and write dm topics from Spark as format("dm").

Options and columns are those of Spark's Kafka source and sink. Spark finds `DefaultSource` in
any installed module named pyspark_*; `register(spark)` does the same explicitly.
"""

from __future__ import annotations

from .errors import DmSourceError
from .source import DefaultSource, DmDataSource


def register(spark) -> None:  # type: ignore[no-untyped-def]
    """Registers format("dm") with a SparkSession (needed only where auto-discovery is off)."""
    spark.dataSource.register(DmDataSource)


__all__ = ["DefaultSource", "DmDataSource", "DmSourceError", "register"]
