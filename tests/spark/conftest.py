"""A real SparkSession (local[2]) for the connector tests; skipped with a reason when pyspark or
Java is missing (`make test` installs both)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e '.[spark]')")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime for Spark (make test installs one with apt-get)")
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[2]").appName("dm-tests")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2").config("spark.driver.memory", "1g")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
