"""@platformatic/kafka against a dm broker: a fifth independent reading of the Kafka protocol (after
librdkafka, kafka-python, aiokafka and KafkaJS), and the only one in the suite written for Kafka 4: it speaks
the newest versions of most APIs and the KIP-848 consumer protocol. One scenario covers what a Node.js
service does (admin calls, an idempotent producer with each codec Node.js 20 has, transactions committed
and aborted, groups of both protocols reading committed records and committing offsets); another is the
one that found dm handing one producer id to two idempotent producers (ADR 0050). The TLS and SASL round
trips are in test_tls.py and test_sasl.py (secure_clients.ROUND_TRIPS)."""

from __future__ import annotations

import pytest
from clients import ConfluentClient
from platformatic import run

pytestmark = pytest.mark.timeout(240)
PER_CODEC = 25
CODECS = 4  # none, gzip, snappy, lz4


def test_two_idempotent_producers_on_one_partition_keep_every_record(broker, topic_name):
    """Each producer names producer 0 epoch 0 in its first InitProducerId. Each must get an id of its own:
    with one id between them, the second one's batches (sequence 0, 4, 8 like the first one's) were
    acknowledged as retries of the first one's and never written."""
    rounds, per_round = 3, 4
    got = run("sharedPartition", broker.bootstrap, topic=topic_name, rounds=rounds, perRound=per_round)
    ids = [tuple(i) for i in got["ids"]]
    assert len(set(ids)) == 2, ids
    acknowledged = sorted(a["offset"] for a in got["acknowledged"])
    assert acknowledged == [per_round * i for i in range(2 * rounds)]  # every batch at offsets of its own
    expected = {f"{p}-{r}-{j}" for p in range(2) for r in range(rounds) for j in range(per_round)}
    assert sorted(got["values"]) == sorted(expected) and got["offsets"] == list(range(len(expected)))


def test_a_node_service_on_kafka_4_apis_produces_transacts_consumes_and_administers(broker, topic_name):
    got = run("features", broker.bootstrap, topic=topic_name, perCodec=PER_CODEC)
    sent = PER_CODEC * CODECS
    assert got["created"] == [topic_name] and got["createdAgain"] == [36]  # TOPIC_ALREADY_EXISTS
    assert got["partitions"] == 4 and got["configs"]["retention.ms"] == "3600000"
    assert got["sent"] == sent
    # Partition 0 ends with the committed transaction's record and marker, the aborted one's and its marker.
    ends = {int(p): offset for p, offset in got["ends"].items()}
    for protocol, group in got["groups"].items():
        seen = group["seen"]
        values = sorted(m["value"] for m in seen)
        assert values == sorted([f"v{i}" for i in range(sent)] + ["committed"]), protocol
        for m in seen:
            if m["value"] != "committed":
                i = int(m["value"][1:])
                assert m["key"] == f"k{i}" and m["headers"]["i"] == str(i), (protocol, m)
        last_read = {p: max(m["offset"] for m in seen if m["partition"] == p) + 1 for p in ends}
        assert {int(p): offset for p, offset in group["committed"].items()} == last_read, protocol
        assert ends[0] == last_read[0] + 3 and all(ends[p] == last_read[p] for p in ends if p)
    assert got["groups"]["classic"]["described"] == [{"state": "Empty", "protocolType": "consumer"}]
    # DescribeGroups on a KIP-848 group: GROUP_ID_NOT_FOUND, as Kafka 4 answers (KIP-1043)
    assert got["groups"]["consumer"]["described"] == {"errors": [69]}
    assert got["lowWatermark"] == 1 and got["listedAfterDelete"] is False


def test_what_platformatic_writes_is_what_librdkafka_reads(broker, topic_name):
    run("roundTrip", broker.bootstrap, topic=topic_name, values=[f"pk-{i}" for i in range(50)])
    read = ConfluentClient(broker.bootstrap).consume(topic_name, 50)
    assert sorted(r.value for r in read) == sorted(f"pk-{i}".encode() for i in range(50))
