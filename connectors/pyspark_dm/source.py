"""The `dm` data source: Spark's Kafka source and sink options and columns, on dm topics."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from .errors import DmSourceError
from .exactly_once import Committer
from .offsets import Offsets, discover, from_json, rate_limit, resolve, split, to_json
from .options import ReadOptions, include_headers, read_options, write_options
from .read import OffsetRange, read_range
from .schema import spark_schema
from .wire import EARLIEST, LATEST, DmClient
from .write import ArrowProducerWriter, check_write_schema, transactions_of


class DmDataSource(DataSource):
    """format("dm"): read and write dm topics, batch and streaming."""

    @classmethod
    def name(cls) -> str:
        return "dm"

    def schema(self) -> StructType:
        return spark_schema(include_headers(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return DmBatchReader(read_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return DmStreamReader(read_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise DmSourceError("save mode overwrite is not supported: a topic is append-only (use append)")
        opts = write_options(self.options)
        check_write_schema(schema, opts)
        if opts.exactly_once:
            Committer(opts).recover()
        return DmBatchWriter(opts, schema, write_id=str(uuid.uuid4()))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DmStreamWriter:
        opts = write_options(self.options)
        check_write_schema(schema, opts)
        if opts.exactly_once:
            # Spark makes the writer before any task of a batch runs (and again for each commit).
            Committer(opts).recover()
        return DmStreamWriter(opts, schema)


# Spark wants at least one input partition even when there is nothing to read.
NOTHING_TO_READ = [InputPartition(None)]


def _read(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    return read_range(partition) if isinstance(partition, OffsetRange) else iter(())


def _ranges(opts: ReadOptions, start: Offsets, end: Offsets) -> list[OffsetRange]:
    pieces = split([(tp, start[tp], end[tp]) for tp in sorted(end) if tp in start], opts.min_partitions)
    return [OffsetRange(topic=t, partition=p, start=a, end=b, bootstrap=opts.bootstrap,
                        include_headers=opts.include_headers, fail_on_data_loss=opts.fail_on_data_loss,
                        fetch_max_bytes=opts.fetch_max_bytes, timeout_s=opts.timeout_s,
                        read_committed=opts.read_committed, client_config=opts.client_config)
            for (t, p), a, b in pieces]


class DmBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        with DmClient(opts.bootstrap, timeout=opts.timeout_s, read_committed=opts.read_committed,
                      client_config=opts.client_config) as client:
            tps = discover(client, opts)
            start = resolve(client, tps, opts.starting or "earliest", opts.starting_timestamp,
                            "startingTimestamp" if opts.starting_timestamp is not None else "startingOffsets",
                            opts.timestamp_strategy)
            end = resolve(client, tps, opts.ending, opts.ending_timestamp,
                          "endingTimestamp" if opts.ending_timestamp is not None else "endingOffsets", "latest")
        # Offsets already deleted by retention are met by the tasks (read_range), per failOnDataLoss.
        bad = [f"{t}-{p} ({start[(t, p)]} > {end[(t, p)]})" for t, p in tps if start[(t, p)] > end[(t, p)]]
        if bad:
            raise DmSourceError(f"startingOffsets is after endingOffsets for {', '.join(bad)}")
        return _ranges(opts, start, end) or NOTHING_TO_READ

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)


class DmStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reads: offsets per topic-partition live in Spark's checkpoint, so a restarted
    query reads exactly the ranges it had not committed (no gap, no duplicate)."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._client: DmClient | None = None
        self._target: Offsets | None = None  # Trigger.AvailableNow: read up to here and stop
        self._latest: Offsets = {}

    @property
    def client(self) -> DmClient:
        if self._client is None:
            self._client = DmClient(self.opts.bootstrap, timeout=self.opts.timeout_s,
                                    read_committed=self.opts.read_committed, client_config=self.opts.client_config)
        return self._client

    def initialOffset(self) -> dict:
        opts = self.opts
        tps = discover(self.client, opts)
        option = "startingTimestamp" if opts.starting_timestamp is not None else "startingOffsets"
        return to_json(resolve(self.client, tps, opts.starting or "latest", opts.starting_timestamp, option,
                               opts.timestamp_strategy))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._available()

    def _available(self) -> Offsets:
        tps = discover(self.client, self.opts)
        return self.client.list_offsets(dict.fromkeys(tps, LATEST)) if tps else {}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_json(start)
        latest = self._target if self._target is not None else self._available()
        self._latest = dict(latest)
        # Partitions that appeared since `start` are read from their beginning.
        new = [tp for tp in latest if tp not in begin]
        if new:
            begin = {**begin, **self.client.list_offsets(dict.fromkeys(new, EARLIEST))}
        vanished = [tp for tp in begin if tp not in latest]
        if vanished and self.opts.fail_on_data_loss:
            names = ", ".join(f"{t}-{p}" for t, p in vanished)
            raise DmSourceError(f"partitions {names} disappeared (topic deleted?); set failOnDataLoss=false "
                                "to carry on without them")
        # A new leader's high watermark can trail the old one's for a moment: never go backwards.
        latest = {tp: max(o, begin[tp]) for tp, o in latest.items()}
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        return to_json(latest)

    def reportLatestOffset(self) -> dict | None:
        return to_json(self._latest) if self._latest else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, until = from_json(start), from_json(end)
        new = [tp for tp in until if tp not in begin]
        if new:
            begin.update(self.client.list_offsets(dict.fromkeys(new, EARLIEST)))
        for tp in until:
            if begin[tp] > until[tp]:
                if self.opts.fail_on_data_loss:
                    raise DmSourceError(f"{tp[0]}-{tp[1]}: offset went back from {begin[tp]} to {until[tp]} "
                                        "(topic recreated or log truncated); set failOnDataLoss=false to go on")
                begin[tp] = until[tp]
        return _ranges(self.opts, begin, until) or NOTHING_TO_READ

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: like Spark's Kafka source, progress lives in Spark's checkpoint only."""

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_client"] = None  # sockets stay on the driver
        return state


class DmBatchWriter(ArrowProducerWriter):
    def commit(self, messages: list) -> None:
        """Exactly-once: the tasks' transactions commit together (at-least-once: records were
        acknowledged in write(), nothing is left to do)."""
        if self.opts.exactly_once:
            query, _, handles = transactions_of(messages)
            Committer(self.opts).commit(query or self.write_id, 0, handles)

    def abort(self, messages: list) -> None:
        if self.opts.exactly_once:
            Committer(self.opts).abort(transactions_of(messages)[2])


class DmStreamWriter(ArrowProducerWriter, DataSourceStreamArrowWriter):
    def commit(self, messages: list, batchId: int) -> None:
        """Exactly-once: commits the batch's transactions (once, even when Spark replays the batch
        after a crash). At-least-once: records were acknowledged in write(); nothing is left."""
        if self.opts.exactly_once:
            query, _, handles = transactions_of(messages)
            Committer(self.opts).commit(query, batchId, handles)

    def abort(self, messages: list, batchId: int) -> None:
        """Exactly-once: the batch's transactions are aborted, so read_committed readers move on at
        once. At-least-once: acknowledged records cannot be taken back (as Spark's Kafka sink)."""
        if self.opts.exactly_once:
            Committer(self.opts).abort(transactions_of(messages)[2])


DefaultSource = DmDataSource
