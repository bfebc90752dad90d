"""examples/clickstream end to end: generator → streaming job → sink topic + Parquet → batch job."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import create_topic, raise_if_failed

pytestmark = pytest.mark.spark
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "clickstream"


@pytest.fixture
def example():
    sys.path.insert(0, str(EXAMPLE))
    try:
        import generator
        import jobs

        yield generator, jobs
    finally:
        sys.path.remove(str(EXAMPLE))


def test_clickstream_pipeline(spark, broker, topic_name, tmp_path, example) -> None:
    generator, jobs = example
    clicks, per_minute = topic_name, topic_name + "-per-minute"
    create_topic(broker.bootstrap, clicks, 3)
    create_topic(broker.bootstrap, per_minute, 2)
    generator.produce(broker.bootstrap, clicks, generator.events(6000, minutes=5, seed=1))
    parquet = str(tmp_path / "parquet")
    query = jobs.start_stream(spark, broker.bootstrap, clicks, per_minute, parquet, str(tmp_path / "ck"),
                              available_now=True)
    query.awaitTermination(180)
    raise_if_failed(query)
    result = jobs.read_back(spark, broker.bootstrap, clicks, per_minute, parquet)
    # Events span 5 minutes; the last window stays open until the watermark passes it.
    assert result["minutes"] >= 4
    assert result["raw"] == result["topic"] == result["parquet"]
    assert sum(result["raw"].values()) >= 6000 * 3 // 5
