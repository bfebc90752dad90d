"""Producing test data and reading it back for the Spark tests, and putting the worker's session right
after a test fails."""

from __future__ import annotations

from typing import Any

from clients import ConfluentClient, Rec


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes | None, bytes | None]],
            compression: str = "none", headers: list[list[tuple[str, bytes]]] | None = None) -> None:
    """(partition, key, value) records, idempotent acks=all; fails the test on any unacknowledged record."""
    ConfluentClient(bootstrap).produce(topic, [
        Rec(key, value, tuple(headers[i]) if headers else (), partition=partition)  # type: ignore[arg-type]
        for i, (partition, key, value) in enumerate(records)], compression=compression)


def create_topic(bootstrap: str, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    ConfluentClient(bootstrap).create_topic(topic, partitions, configs)


def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the future resolves
    admin.create_partitions([NewPartitions(topic, total)])[topic].result(15)


def read(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    reader = spark.read.format("dm").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def rows(df: Any) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(partition, offset, key, value), sorted."""
    return sorted((r.partition, r.offset, None if r.key is None else bytes(r.key),
                   None if r.value is None else bytes(r.value))
                  for r in df.select("partition", "offset", "key", "value").collect())


def raise_if_failed(query: Any) -> None:
    """Fails the test with the error a streaming query died of, if it died: Spark's own reason (which the
    conftest's rerun filter recognises when it is Spark's Python worker start-up), not the empty result
    the query left behind."""
    error = query.exception()
    if error is not None:
        raise AssertionError(f"the query failed: {error}")


def rows_read(query: Any) -> int:
    """The rows a streaming query has read so far; for a query that died, its error at once (raise_if_failed),
    so that a wait on its progress fails with Spark's reason, not with a timeout of its own."""
    raise_if_failed(query)
    return sum(p["numInputRows"] for p in query.recentProgress)


def recover_the_session() -> None:
    """After a failed Spark test, the next one starts on a py4j connection that is known to be in step.

    PySpark pins one py4j connection to each Python thread. pytest-timeout stops a test by raising inside
    that connection's read of the JVM's answer, which py4j does not catch (the exception is not an
    `Exception`), so the connection stays pinned with the answer still to come: every later command of the
    worker then reads the answer meant for the one before it ("… does not exist in the JVM"), and at
    00bfcb0 one timeout failed 21 later tests that way. Closing it makes py4j open a new one, served by a new
    JVM thread, which has no active session: the session is made active there again, or every later
    format("dm") write fails with DATA_SOURCE_NOT_FOUND (make test at 64c3673: three writes after two
    reruns). The streaming queries the failed test left running are stopped too, so they do not load the
    tests after it."""
    import pyspark_dm
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    gateway = SparkContext._gateway
    if gateway is None:
        return
    client = gateway._gateway_client
    pinned = client.get_thread_connection() if hasattr(client, "get_thread_connection") else None
    if pinned is not None:
        pinned.close(reset=True)
    # the session this worker built, known on the Python side: asking the JVM for its active one would
    # answer None on the new connection
    session = SparkSession._instantiatedSession
    if session is None:
        return
    pyspark_dm.use_in_this_thread(session)
    for query in session.streams.active:
        query.stop()
