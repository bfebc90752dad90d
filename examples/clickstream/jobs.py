"""The clickstream pipeline's Spark jobs, shared by the command-line entry points and the tests."""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

CLICK_SCHEMA = "user string, page string, ts timestamp"


def arguments(description: str) -> argparse.ArgumentParser:
    """The options both jobs take: where dm is, the two topics and the Parquet copy."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--source", default="clicks")
    parser.add_argument("--sink-topic", default="clicks-per-minute")
    parser.add_argument("--parquet", default="./data/clickstream/clicks-per-minute")
    return parser


def session(app: str) -> SparkSession:
    # Spark's Python workers must run this interpreter (the one with pyspark_dm installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.appName(app).master(os.environ.get("SPARK_MASTER", "local[2]"))
             .config("spark.sql.shuffle.partitions", "4").config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    return spark


def clicks_per_minute(spark: SparkSession, bootstrap: str, source: str) -> DataFrame:
    """Counts per page per one-minute event-time window; a window is final one minute after it ends."""
    clicks = (spark.readStream.format("dm")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source)
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", 50_000)
              .load()
              .select(F.from_json(F.col("value").cast("string"), CLICK_SCHEMA).alias("click"))
              .select("click.*"))
    return (clicks.withWatermark("ts", "1 minute")
            .groupBy(F.window("ts", "1 minute").alias("window"), "page")
            .count()
            .select(F.col("window.start").alias("minute"), "page", "count"))


def start_stream(spark: SparkSession, bootstrap: str, source: str, sink_topic: str, parquet: str,
                 checkpoint: str, available_now: bool) -> StreamingQuery:
    """Each micro-batch's final windows go to the sink topic (JSON, keyed by page) and to Parquet."""

    def write_both(batch: DataFrame, _batch_id: int) -> None:
        batch.persist()
        (batch.select(F.col("page").alias("key"), F.to_json(F.struct("minute", "page", "count")).alias("value"))
         .write.format("dm").option("kafka.bootstrap.servers", bootstrap).option("topic", sink_topic)
         .mode("append").save())
        batch.write.mode("append").parquet(parquet)
        batch.unpersist()

    writer = (clicks_per_minute(spark, bootstrap, source).writeStream.outputMode("append")
              .option("checkpointLocation", checkpoint).foreachBatch(write_both))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="5 seconds")
    return writer.start()


def read_back(spark: SparkSession, bootstrap: str, source: str, sink_topic: str, parquet: str) -> dict:
    """Batch job: clicks per page from the raw topic, next to the windowed counts from the sink
    topic and from Parquet, for the minutes the stream has finalised."""
    def topic(name: str) -> DataFrame:
        return (spark.read.format("dm").option("kafka.bootstrap.servers", bootstrap).option("subscribe", name)
                .load())

    counted = (topic(sink_topic)
               .select(F.from_json(F.col("value").cast("string"), "minute timestamp, page string, count long")
                       .alias("c")).select("c.*"))
    minutes = [r.minute for r in counted.select("minute").distinct().collect()]
    raw = (topic(source).select(F.from_json(F.col("value").cast("string"), CLICK_SCHEMA).alias("click"))
           .select(F.date_trunc("minute", "click.ts").alias("minute"), "click.page")
           .where(F.col("minute").isin(minutes)))
    def per_page(df: DataFrame, column: str | None) -> dict[str, int]:
        agg = df.groupBy("page").agg(F.sum(column).alias("n") if column else F.count("*").alias("n"))
        return {r.page: int(r.n) for r in agg.collect()}

    return {"minutes": len(minutes),
            "raw": per_page(raw, None),
            "topic": per_page(counted, "count"),
            "parquet": per_page(spark.read.parquet(parquet), "count") if os.path.exists(parquet) else {}}
