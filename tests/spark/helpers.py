"""Producing test data and reading it back for the Spark tests."""

from __future__ import annotations

from typing import Any


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes | None, bytes | None]],
            compression: str = "none", headers: list[list[tuple[str, bytes]]] | None = None) -> None:
    """(partition, key, value) records, acks=all; fails the test on any unacknowledged record."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "compression.type": compression, "log_level": 4})
    failures: list[str] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    for i, (partition, key, value) in enumerate(records):
        kwargs: dict[str, Any] = {"partition": partition, "on_delivery": report}
        if key is not None:
            kwargs["key"] = key
        if headers is not None:
            kwargs["headers"] = headers[i]
        while True:
            try:
                producer.produce(topic, value, **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(30) == 0 and not failures, failures[:3]


def create_topic(bootstrap: str, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs or {})])[topic].result(15)


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
