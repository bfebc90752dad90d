"""format("dm") against a secured listener (SASL_SSL, SCRAM-SHA-512), configured with the options a
pipeline gives Spark's own Kafka source and sink (`kafka.security.protocol`, `kafka.sasl.jaas.config`,
`kafka.ssl.truststore.*`): a batch write, an exactly-once streaming copy and a read_committed batch
read, every connection of the reader, the writer and the driver's commit log over TLS and SASL."""

from __future__ import annotations

import pytest
from clients import ConfluentClient
from helpers import create_topic, raise_if_failed
from secure import Pki, add_scram_users, secure_broker

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]
ROWS = 500


@pytest.fixture(scope="module")
def sasl_ssl(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("spark-security")
    ca = Pki(base / "pki")
    broker, ports = secure_broker(base / "data", {"PLAINTEXT": "PLAINTEXT", "SASL_SSL": "SASL_SSL"}, {
        "ssl.keystore.location": ca.server(), "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200})
    broker.start()
    add_scram_users(broker.bootstrap, {"etl": "etl-pw"}, ("SCRAM-SHA-512",))
    yield broker, f"localhost:{ports['SASL_SSL']}", ca
    broker.stop()


def secured(bootstrap: str, ca: Pki, password: str = "etl-pw") -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                      f'username="etl" password="{password}";',
            "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(ca.ca_file)}


def test_write_copy_exactly_once_and_read_committed_over_sasl_ssl(spark, sasl_ssl, topic_name, tmp_path) -> None:
    broker, bootstrap, ca = sasl_ssl
    options = secured(bootstrap, ca)
    # names of their own: a rerun (tests/spark/conftest.py) finds the first try's topics on this shared broker
    clicks, copy = topic_name, topic_name + "-copy"
    create_topic(broker.bootstrap, clicks, 2)
    create_topic(broker.bootstrap, copy, 2)
    df = spark.range(ROWS).selectExpr("CAST(id AS STRING) AS key", "CONCAT('click-', id) AS value")
    df.write.format("dm").options(**options).option("topic", clicks).mode("append").save()

    source = spark.readStream.format("dm").options(**options).option("subscribe", clicks) \
        .option("startingOffsets", "earliest").load()
    query = (source.select("key", "value").writeStream.format("dm").options(**options)
             .option("topic", copy).option("deliveryGuarantee", "exactly-once")
             .option("transactionalIdPrefix", "secured-copy").option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    raise_if_failed(query)

    copied = spark.read.format("dm").options(**options).option("subscribe", copy) \
        .option("kafka.isolation.level", "read_committed").load().collect()
    assert sorted(bytes(r.value) for r in copied) == sorted(f"click-{i}".encode() for i in range(ROWS))
    # and what a plain librdkafka consumer on the plaintext listener sees (read_committed, its default)
    assert len(ConfluentClient(broker.bootstrap).consume(copy, ROWS, timeout=20)) == ROWS


def test_wrong_credentials_and_settings_are_named(spark, sasl_ssl, topic_name) -> None:
    broker, bootstrap, ca = sasl_ssl
    create_topic(broker.bootstrap, topic_name, 1)
    with pytest.raises(Exception, match="SASL authentication as 'etl' failed"):
        spark.read.format("dm").options(**secured(bootstrap, ca, password="nope")).option("subscribe", topic_name) \
            .load().collect()
    jks = {**secured(bootstrap, ca), "kafka.ssl.truststore.type": "JKS"}
    with pytest.raises(Exception, match=r"option kafka\.ssl\.truststore\.type: JKS is not supported"):
        spark.read.format("dm").options(**jks).option("subscribe", topic_name).load().collect()
