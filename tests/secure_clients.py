"""The three Python Kafka clients, KafkaJS (and kcat) over TLS and SASL: a round trip of records through each,
with Kafka's client settings only — what a user of that client writes."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from kafkajs import KAFKAJS
from platformatic import PLATFORMATIC


@dataclass
class Credentials:
    """Client-side security, in one place; each client gets it in its own spelling."""

    protocol: str = "PLAINTEXT"  # SSL, SASL_PLAINTEXT, SASL_SSL
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    mechanism: str = ""
    username: str = ""
    password: str = ""

    def librdkafka(self) -> dict[str, str]:
        c = {"security.protocol": self.protocol}
        if self.ca:
            c["ssl.ca.location"] = str(self.ca)
        if self.cert:
            c["ssl.certificate.location"] = str(self.cert)
            c["ssl.key.location"] = str(self.key)
        if self.mechanism:
            c.update({"sasl.mechanism": self.mechanism, "sasl.username": self.username,
                      "sasl.password": self.password})
        return c

    def kafka_python(self) -> dict[str, object]:
        c: dict[str, object] = {"security_protocol": self.protocol}
        if self.ca:
            c.update(ssl_cafile=str(self.ca), ssl_check_hostname=True)
        if self.cert:
            c.update(ssl_certfile=str(self.cert), ssl_keyfile=str(self.key))
        if self.mechanism:
            c.update(sasl_mechanism=self.mechanism, sasl_plain_username=self.username,
                     sasl_plain_password=self.password)
        return c

    def aiokafka(self) -> dict[str, object]:
        from aiokafka.helpers import create_ssl_context

        c: dict[str, object] = {"security_protocol": self.protocol}
        if self.ca:
            c["ssl_context"] = create_ssl_context(cafile=str(self.ca), certfile=str(self.cert) if self.cert else None,
                                                  keyfile=str(self.key) if self.key else None)
        if self.mechanism:
            c.update(sasl_mechanism=self.mechanism, sasl_plain_username=self.username,
                     sasl_plain_password=self.password)
        return c


def confluent_round_trip(bootstrap: str, creds: Credentials, topic: str, values: list[bytes]) -> list[bytes]:
    from confluent_kafka import Consumer, KafkaException, Producer

    errors: list[object] = []
    producer = Producer({"bootstrap.servers": bootstrap, **creds.librdkafka(), "acks": "all"})
    for v in values:
        producer.produce(topic, v, on_delivery=lambda err, _m: errors.append(err) if err else None)
    left = producer.flush(20)
    if errors or left:
        raise KafkaException(errors[0] if errors else "delivery timed out")
    consumer = Consumer({"bootstrap.servers": bootstrap, **creds.librdkafka(), "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            got.append(msg.value())
    finally:
        consumer.close()
    return got


def kafka_python_round_trip(bootstrap: str, creds: Credentials, topic: str, values: list[bytes]) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **creds.kafka_python())
    for v in values:
        producer.send(topic, v).get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"kp-{topic}", auto_offset_reset="earliest",
                             consumer_timeout_ms=15000, **creds.kafka_python())
    got = []
    for msg in consumer:
        got.append(msg.value)
        if len(got) == len(values):
            break
    consumer.close()
    return got


def aiokafka_round_trip(bootstrap: str, creds: Credentials, topic: str, values: list[bytes]) -> list[bytes]:
    async def go() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", **creds.aiokafka())
        await producer.start()
        try:
            for v in values:
                await producer.send_and_wait(topic, v)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"ak-{topic}",
                                    auto_offset_reset="earliest", **creds.aiokafka())
        await consumer.start()
        got: list[bytes] = []
        try:
            while len(got) < len(values):
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 20)
                for records in batch.values():
                    got += [r.value for r in records]
        finally:
            await consumer.stop()
        return got

    return asyncio.run(go())


def refused(bootstrap: str, creds: Credentials, timeout: float = 4) -> str:
    """The error a librdkafka client gets asking for metadata; AssertionError if it gets an answer."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    reported: list[str] = []  # what librdkafka's error callback says (the authentication error itself)
    admin = AdminClient({"bootstrap.servers": bootstrap, **creds.librdkafka(), "log_level": "0",
                         "error_cb": lambda err: reported.append(str(err))})
    try:
        admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        admin.poll(0.5)
        return "; ".join([str(exc), *reported])
    raise AssertionError(f"{bootstrap} answered a client with {creds}")


ROUND_TRIPS = {"confluent-kafka": confluent_round_trip, "kafka-python": kafka_python_round_trip,
               "aiokafka": aiokafka_round_trip, "kafkajs": KAFKAJS.round_trip,
               "platformatic": PLATFORMATIC.round_trip}


def kcat(bootstrap: str, creds: Credentials, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    path = shutil.which("kcat")
    if path is None:
        raise FileNotFoundError("kcat")
    options = [x for k, v in creds.librdkafka().items() for x in ("-X", f"{k}={v}")]
    return subprocess.run([path, "-b", bootstrap, *options, *args], input=stdin, capture_output=True, text=True,
                          timeout=60)
