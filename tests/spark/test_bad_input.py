"""Bad options and data give an error that names the option or column, never a hang or wrong data."""

from __future__ import annotations

import pytest
from harness import free_port
from helpers import create_topic, read

pytestmark = pytest.mark.spark


def test_unknown_topic_names_the_option(spark, broker, topic_name) -> None:
    with pytest.raises(Exception, match=f"option subscribe: unknown topic.*{topic_name}"):
        read(spark, broker.bootstrap, topic_name).collect()


def test_unreachable_broker_names_the_option(spark) -> None:
    with pytest.raises(Exception, match=r"option kafka\.bootstrap\.servers: no broker"):
        read(spark, f"127.0.0.1:{free_port()}", "anything").collect()


@pytest.mark.parametrize(("options", "message"), [
    ({"startingOffsets": '{"t": {"0": 5'}, "option startingOffsets: not 'earliest', 'latest' or JSON"),
    ({"startingOffsets": '{"t": {"0": "five"}}'}, "option startingOffsets: t-0: offset must be"),
    ({"startingOffsets": "latest"}, "option startingOffsets: 'latest' is not allowed"),
    ({"endingOffsets": "earliest"}, "option endingOffsets: 'earliest' is not allowed"),
    ({"includeHeaders": "yes"}, "option includeHeaders: expected true or false"),
    ({"maxOffsetsPerTrigger": "0"}, "option maxOffsetsPerTrigger: must be at least 1"),
    ({"startingOfsets": "earliest"}, "unknown option 'startingofsets'"),
    ({"subscribePattern": "x.*"}, "exactly one of the options subscribe, subscribePattern or assign"),
])
def test_bad_read_options(spark, broker, topic_name, options, message) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    with pytest.raises(Exception, match=message.replace("(", r"\(").replace("*", r"\*")):
        read(spark, broker.bootstrap, topic_name, **options).collect()


def test_offsets_json_must_name_every_partition(spark, broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, 2)
    with pytest.raises(Exception, match=f"option startingOffsets: give an offset for every partition.*{topic_name}-1"):
        read(spark, broker.bootstrap, topic_name, startingOffsets=f'{{"{topic_name}": {{"0": 0}}}}').collect()


def test_streaming_rejects_ending_offsets(spark, broker, topic_name, tmp_path) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    df = (spark.readStream.format("dm").option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribe", topic_name).option("endingOffsets", "latest").load())
    with pytest.raises(Exception, match="endingOffsets/endingTimestamp are for batch queries only"):
        df.writeStream.format("noop").option("checkpointLocation", str(tmp_path)).start().awaitTermination(30)


def test_write_needs_a_value_column_and_a_topic(spark, broker, topic_name) -> None:
    create_topic(broker.bootstrap, topic_name, 1)
    no_value = spark.range(3).selectExpr("CAST(id AS STRING) AS key")
    with pytest.raises(Exception, match="needs a 'value' column"):
        no_value.write.format("dm").option("kafka.bootstrap.servers", broker.bootstrap) \
            .option("topic", topic_name).mode("append").save()
    no_topic = spark.range(3).selectExpr("CAST(id AS STRING) AS value")
    with pytest.raises(Exception, match="set the option topic or give the data a 'topic' column"):
        no_topic.write.format("dm").option("kafka.bootstrap.servers", broker.bootstrap).mode("append").save()
    wrong_type = spark.range(3).selectExpr("id AS value")
    with pytest.raises(Exception, match="column 'value' must be string or binary"):
        wrong_type.write.format("dm").option("kafka.bootstrap.servers", broker.bootstrap) \
            .option("topic", topic_name).mode("append").save()
    with pytest.raises(Exception, match="save mode overwrite is not supported"):
        no_topic.write.format("dm").option("kafka.bootstrap.servers", broker.bootstrap) \
            .option("topic", topic_name).mode("overwrite").save()


def test_write_to_a_new_topic_creates_it_as_kafka_does(spark, broker, topic_name) -> None:
    """auto.create.topics.enable is on by default (as in Kafka): the sink's metadata lookup creates it."""
    df = spark.range(3).selectExpr("CAST(id AS STRING) AS value")
    df.write.format("dm").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic_name) \
        .mode("append").save()
    assert sorted(bytes(r.value) for r in read(spark, broker.bootstrap, topic_name).collect()) == [b"0", b"1", b"2"]
