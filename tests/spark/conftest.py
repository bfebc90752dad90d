"""A real SparkSession (local[2]) for the connector tests; skipped with a reason when pyspark or
Java is missing (`make test` installs both)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator

import pytest
from helpers import recover_the_session


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


# Spark gives the Python worker it starts for a streaming source a fixed 10 s to connect back
# (PythonWorkerFactory.createSimpleWorker; no setting changes it). The worker imports pyspark and pyarrow
# first, which on a 2-core machine also running the kind e2e suite has taken longer. That is Spark's start-up,
# not dm: such a test runs once more, and a failure with any other cause fails at once.
SPARK_WORKER_START_UP = "Python worker failed to connect back"


def _is_spark_test(item: pytest.Item) -> bool:
    return str(item.path).startswith(os.path.dirname(__file__) + os.sep)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _is_spark_test(item):
            item.add_marker(pytest.mark.flaky(reruns=1, only_rerun=[SPARK_WORKER_START_UP]))
            _time_the_test_only(config, item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    yield
    failed = call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception)
    if call.when == "call" and failed and _is_spark_test(item):
        try:
            recover_the_session()
        except Exception as e:  # the test's own failure is what gets reported; this must not replace it
            print(f"\nSpark session not recovered after {item.nodeid}: {e!r}", file=sys.stderr)


def _time_the_test_only(config: pytest.Config, item: pytest.Item) -> None:
    """The test's time limit counts the test, not the worker's SparkSession start, which the first Spark
    test of each worker pays: beside the e2e suite that start took 147 s of a 300 s limit, and a test
    stopped by pytest-timeout leaves the session's py4j connection unusable, so every later Spark test of
    that worker failed too (make test at 00bfcb0: one timeout, 20 failures after it)."""
    marker = item.get_closest_marker("timeout")  # the Spark tests give their limit as the marker's argument
    limit = float(marker.args[0]) if marker is not None else float(config.getini("timeout"))
    item.add_marker(pytest.mark.timeout(limit, func_only=True), append=False)
