"""The columns of Spark's Kafka source, in Spark SQL and in Arrow."""

from __future__ import annotations

from functools import cache

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

# Field names and nullability exactly as Spark converts array<struct<key:string,value:binary>>.
HEADERS_TYPE = pa.list_(pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])))
KAFKA_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]


@cache
def kafka_schema(include_headers: bool) -> pa.Schema:
    return pa.schema([*KAFKA_FIELDS, pa.field("headers", HEADERS_TYPE)] if include_headers else KAFKA_FIELDS)


def spark_schema(include_headers: bool) -> StructType:
    """The same columns as Spark sees them: derived, so the two can never disagree."""
    return from_arrow_schema(kafka_schema(include_headers))
