"""Executor side of writes: Arrow batches → an idempotent confluent-kafka producer.

At-least-once by default, like Spark's Kafka sink: a task returns only once every record it sent
is acknowledged (acks=all); a retried task or a replayed micro-batch may write records again.
With deliveryGuarantee=exactly-once each task writes in a transaction it leaves open for the
driver to commit (exactly_once.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from .errors import DmSourceError
from .options import WriteOptions
from .txn_client import TxnHandle

TEXT_OR_BYTES = (StringType, BinaryType)


def check_write_schema(schema: StructType, opts: WriteOptions) -> None:
    """The columns Spark's Kafka sink takes: value (required), key, topic, partition, headers."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in fields:
        raise DmSourceError(f"the data to write needs a 'value' column (string or binary); it has "
                            f"{', '.join(schema.fieldNames()) or 'no columns'}")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], TEXT_OR_BYTES):
            raise DmSourceError(f"column {name!r} must be string or binary, not {fields[name].simpleString()}")
    if opts.topic is None and "topic" not in fields:
        raise DmSourceError("set the option topic or give the data a 'topic' column")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise DmSourceError(f"column 'topic' must be a string, not {fields['topic'].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise DmSourceError(f"column 'partition' must be an int, not {fields['partition'].simpleString()}")
    headers = fields.get("headers")
    if headers is not None:
        ok = (isinstance(headers, ArrayType) and isinstance(headers.elementType, StructType)
              and [f.name for f in headers.elementType.fields] == ["key", "value"]
              and isinstance(headers.elementType.fields[0].dataType, StringType)
              and isinstance(headers.elementType.fields[1].dataType, BinaryType))
        if not ok:
            raise DmSourceError("column 'headers' must be array<struct<key:string,value:binary>>, not "
                                f"{headers.simpleString()}")


@dataclass
class Written(WriterCommitMessage):
    records: int
    txn: TxnHandle | None = None  # exactly-once: the task's open transaction, for the driver to commit
    query: str = ""
    batch: int = 0


class ArrowProducerWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions, schema: StructType, write_id: str = "") -> None:
        self.opts = opts
        self.columns = {f.name.lower(): f.name for f in schema.fields}
        self.write_id = write_id  # a batch write's own id: its transactions' "query" in the commit log

    def _producer(self) -> Any:
        from confluent_kafka import Producer

        config = {"linger.ms": "5", "compression.type": "lz4", "log_level": "4", **self.opts.client_config,
                  "bootstrap.servers": self.opts.bootstrap, "enable.idempotence": "true", "acks": "all"}
        try:
            return Producer(config)
        except Exception as exc:  # KafkaException for a bad kafka.* setting
            raise DmSourceError(f"producer options (kafka.*): {exc}") from None

    def _column(self, batch: pa.RecordBatch, name: str) -> list | None:
        """One of the sink's columns as Python values (strings as bytes), None when absent."""
        actual = self.columns.get(name)
        if actual is None:
            return None
        column = batch.column(actual)
        if name in ("key", "value") and pa.types.is_string(column.type):
            column = column.cast(pa.binary())  # in C++, instead of encoding every row in Python
        return column.to_pylist()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        if not self.opts.exactly_once:
            producer = self._producer()
            count = self._send(producer, iterator)
            return Written(count)
        from .exactly_once import open_transaction, task_identity

        query, batch, partition = task_identity()
        producer, handle = open_transaction(self.opts, partition)
        try:
            count = self._send(producer, iterator)
        except BaseException:
            producer.abort_transaction(self.opts.timeout_s)
            raise
        if count == 0:
            producer.abort_transaction(self.opts.timeout_s)  # nothing sent: nothing for the driver to end
            return Written(0, query=query or self.write_id, batch=batch)
        # Left open on purpose: the driver commits it together with the other tasks' transactions.
        return Written(count, handle, query or self.write_id, batch)

    def _send(self, producer: Any, iterator: Iterator[pa.RecordBatch]) -> int:
        """Sends every row; returns how many once all are acknowledged (acks=all)."""
        from dm_broker.tools.client import produce_waiting
        from dm_broker.tools.produce import topic_partitioner

        errors: list[str] = []
        partitioners: dict[str, Any] = {}

        def report(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        count = 0
        for batch in iterator:
            values = self._column(batch, "value")
            keys = self._column(batch, "key")
            topics = None if self.opts.topic else self._column(batch, "topic")
            parts = self._column(batch, "partition")
            headers = self._column(batch, "headers")
            for i, value in enumerate(values):
                topic = self.opts.topic or (topics[i] if topics else None)
                if not topic:
                    raise DmSourceError(f"row {count}: the 'topic' column is null and no topic option is set")
                key = keys[i] if keys else None
                partition = parts[i] if parts else None
                if partition is None:
                    chooser = partitioners.get(topic)
                    if chooser is None:
                        try:
                            chooser = partitioners[topic] = topic_partitioner(self.opts.bootstrap, topic,
                                                                                    self.opts.client_config)
                        except LookupError as exc:
                            raise DmSourceError(f"writing: {exc}") from None
                    partition = chooser.choose(key)
                kwargs: dict[str, Any] = {"partition": partition, "on_delivery": report}
                if key is not None:
                    kwargs["key"] = key
                if headers and headers[i]:
                    kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i]]
                produce_waiting(producer, topic, value, **kwargs)
                count += 1
                if errors:
                    break
            producer.poll(0)
            if errors:
                break
        remaining = producer.flush(self.opts.timeout_s)
        if errors or remaining:
            raise DmSourceError(f"{len(errors) + remaining} record(s) were not acknowledged: {errors[:3]}")
        return count


def transactions_of(messages: list) -> tuple[str, int, list[TxnHandle]]:
    """(query, batch, open transactions) of a batch's commit messages (None for failed tasks)."""
    written = [m for m in messages if isinstance(m, Written)]
    queries = {m.query for m in written}
    if len(queries) > 1:
        raise DmSourceError(f"the commit messages of one batch name several queries: {sorted(queries)}")
    return (queries.pop() if queries else "", written[0].batch if written else 0,
            [m.txn for m in written if m.txn is not None])
