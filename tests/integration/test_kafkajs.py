"""KafkaJS against a dm broker: a client implemented from the protocol in JavaScript, so it checks dm's
Kafka wire protocol against a fourth independent reading of it (after librdkafka, kafka-python and aiokafka).
One scenario covers what a Node.js service does: admin calls, an idempotent producer (plain and gzip
batches, keys, headers), transactions committed and aborted, a consumer group reading committed records and
committing its offsets; what KafkaJS writes is read back by confluent-kafka, and what it is refused says
why. The TLS and SASL round trips are in test_tls.py and test_sasl.py (secure_clients.ROUND_TRIPS)."""

from __future__ import annotations

import pytest
from clients import ConfluentClient
from kafkajs import run
from secure import secure_broker
from secure_clients import Credentials

pytestmark = pytest.mark.timeout(240)
COUNT = 200


def test_a_node_service_produces_transacts_consumes_and_administers(broker, topic_name):
    got = run("features", broker.bootstrap, topic=topic_name, count=COUNT)
    assert got["created"] is True and got["createdAgain"] is False  # the second create: TOPIC_ALREADY_EXISTS
    assert got["sentErrors"] == 0
    consumed = got["consumed"]
    values = sorted((m["value"] for m in consumed), key=lambda v: (len(v), v))
    # Every record once; the committed transaction's record, not the aborted one's.
    assert values == sorted([f"v{i}" for i in range(COUNT)] + ["committed"], key=lambda v: (len(v), v))
    for m in consumed:
        if m["value"] != "committed":
            i = int(m["value"][1:])
            assert m["key"] == (f"k{i}" if i % 2 else None) and m["headers"] == {"i": str(i)}
    # Offsets run on in each partition; committed offsets are where the group stopped reading.
    ends = {int(p["partition"]): int(p["high"]) for p in got["topicOffsets"]}
    for partition in ends:
        offsets = sorted(m["offset"] for m in consumed if m["partition"] == partition)
        assert offsets == list(range(len(offsets)))
    committed = {p["partition"]: int(p["offset"]) for p in got["offsets"][0]["partitions"]}
    last_read = {p: max(m["offset"] for m in consumed if m["partition"] == p) + 1 for p in ends}
    assert committed == last_read
    # Partition 0: the aborted record and both markers follow the last record read.
    assert ends[0] == last_read[0] + 3 and all(ends[p] == last_read[p] for p in ends if p)
    assert got["groups"][0]["state"] == "Empty" and got["groups"][0]["protocolType"] == "consumer"
    assert got["configs"]["cleanup.policy"] == "delete"
    assert got["partitionsAfterIncrease"] == 4 and got["listedAfterDelete"] is False


def test_what_kafkajs_writes_is_what_librdkafka_reads(broker, topic_name):
    run("roundTrip", broker.bootstrap, topic=topic_name, values=[f"js-{i}" for i in range(50)])
    read = ConfluentClient(broker.bootstrap).consume(topic_name, 50)
    assert sorted(r.value for r in read) == sorted(f"js-{i}".encode() for i in range(50))


def test_kafkajs_is_told_why_it_is_refused(tmp_path):
    broker, ports = secure_broker(tmp_path / "data", {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT"}, {
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";',
        "connection.failed.authentication.delay.ms": 50,
    })
    with broker:
        address = f"127.0.0.1:{ports['SASL_PLAINTEXT']}"
        wrong = Credentials("SASL_PLAINTEXT", mechanism="PLAIN", username="alice", password="nope")
        error = run("refused", address, wrong)["error"]
        # dm's own reason, as Kafka words it, reaches the application through KafkaJS's error
        assert error is not None and "Authentication failed: Invalid username or password" in error, error
        right = Credentials("SASL_PLAINTEXT", mechanism="PLAIN", username="alice", password="alice-secret")
        assert run("refused", address, right)["error"] is None
