"""Connector option parsing and offset planning (pure functions; no Spark JVM needed)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from pyspark_dm.errors import DmSourceError
from pyspark_dm.offsets import check_lost, from_json, rate_limit, split, to_json
from pyspark_dm.options import parse_offsets, read_options, write_options

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "a"}


def test_offsets_json_round_trips_in_spark_kafka_format() -> None:
    offsets = {("a", 0): 5, ("a", 1): 7, ("b", 0): 0}
    assert to_json(offsets) == {"a": {"0": 5, "1": 7}, "b": {"0": 0}}
    assert from_json(to_json(offsets)) == offsets


def test_parse_offsets() -> None:
    assert parse_offsets("startingOffsets", " Earliest ") == "earliest"
    assert parse_offsets("startingOffsets", '{"a": {"0": 23, "1": -2}}') == {"a": {0: 23, 1: -2}}
    for bad in ('{"a": 1}', "[1]", '{"a": {"x": 1}}', '{"a": {"0": -3}}', '{"a": {"0": true}}', "{", "{}"):
        with pytest.raises(DmSourceError, match="option startingOffsets"):
            parse_offsets("startingOffsets", bad)
    with pytest.raises(DmSourceError, match="option endingOffsets"):
        parse_offsets("endingOffsets", '{"a": {"0": -2}}', allow_earliest=False)


def test_read_options_defaults_and_aliases() -> None:
    opts = read_options({"bootstrap.servers": "h:1", "subscribe": "a, b"}, streaming=True)
    assert opts.subscribe == ("a", "b") and opts.bootstrap == "h:1"
    assert opts.starting is None and opts.fail_on_data_loss and not opts.include_headers
    assert opts.max_offsets_per_trigger is None


@pytest.mark.parametrize(("options", "message"), [
    ({"subscribe": "a"}, "option kafka.bootstrap.servers is required"),
    ({**BASE, "kafka.bootstrap.servers": "nohost"}, "option kafka.bootstrap.servers: 'nohost' is not host:port"),
    ({**BASE, "subscribePattern": "("}, "exactly one of the options"),
    ({"kafka.bootstrap.servers": "h:1", "subscribePattern": "("}, "option subscribePattern: '\\(' is not a regular"),
    ({"kafka.bootstrap.servers": "h:1", "assign": "[1]"}, "option assign: expected JSON"),
    ({**BASE, "minPartitions": "x"}, "option minPartitions: expected an integer"),
    ({**BASE, "failOnDataLoss": "maybe"}, "option failOnDataLoss: expected true or false"),
    ({**BASE, "startingOffsetsByTimestampStrategy": "first"}, "option startingOffsetsByTimestampStrategy"),
    ({**BASE, "subscibe": "a"}, "unknown option 'subscibe' \\(did you mean subscribe\\?\\)"),
])
def test_bad_read_options(options, message) -> None:
    with pytest.raises(DmSourceError, match=message):
        read_options(options, streaming=False)


def test_write_options_keep_producer_settings() -> None:
    opts = write_options({"kafka.bootstrap.servers": "h:1", "topic": "t", "kafka.linger.ms": "20",
                          "checkpointLocation": "/tmp/x"})
    assert opts.topic == "t" and opts.client_config == {"linger.ms": "20"}
    with pytest.raises(DmSourceError, match="unknown option 'subscribe'"):
        write_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t"})


def test_security_options_in_spark_kafka_sources_names_become_librdkafkas() -> None:
    # Spark hands options over lower-cased; the JAAS value keeps its case
    opts = read_options({**BASE, "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN",
                         "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
                                                   'required username="Etl" password="Pw";'}, streaming=False)
    assert opts.client_config == {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                  "sasl.username": "Etl", "sasl.password": "Pw"}


@pytest.mark.parametrize(("options", "message"), [
    ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.jaas.config": "x"}, "option kafka.sasl.jaas.config: expected"),
    ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.username": "u", "kafka.sasl.password": "p"},
     "option kafka.sasl.mechanism: GSSAPI is not supported"),
    ({"kafka.ssl.truststore.location": "/ca.pem"}, "option kafka.ssl.truststore.location is set but "
                                                   "security.protocol is PLAINTEXT"),
    ({"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "/nowhere/ca.pem"},
     "kafka.\\* options: client TLS: /nowhere/ca.pem does not exist"),
])
def test_bad_security_options_fail_on_the_driver(options, message) -> None:
    with pytest.raises(DmSourceError, match=message):
        write_options({"kafka.bootstrap.servers": "h:1", "topic": "t", **options})


def test_exactly_once_write_options() -> None:
    base = {"kafka.bootstrap.servers": "h:1", "topic": "t"}
    assert not write_options(base).exactly_once
    opts = write_options({**base, "deliveryGuarantee": "Exactly-Once", "transactionalIdPrefix": " orders "})
    assert opts.exactly_once and opts.transactional_id_prefix == "orders"
    assert opts.transaction_timeout_ms == 900_000 and opts.commit_log_topic == "dm-spark-sink-commits"
    opts = write_options({**base, "deliveryGuarantee": "exactly-once", "transactionalIdPrefix": "p",
                          "kafka.transaction.timeout.ms": "60000", "commitLogTopic": "mine"})
    assert opts.transaction_timeout_ms == 60_000 and opts.commit_log_topic == "mine"
    for bad, message in (({"deliveryGuarantee": "exactly-once"}, "needs the option transactionalIdPrefix"),
                         ({"deliveryGuarantee": "at-most-once"}, "at-least-once or exactly-once"),
                         ({"transactionalIdPrefix": "p"}, "is for deliveryGuarantee=exactly-once"),
                         ({"kafka.transactional.id": "x"}, "names its transactions itself"),
                         ({"deliveryGuarantee": "exactly-once", "transactionalIdPrefix": "p",
                           "kafka.transaction.timeout.ms": "soon"}, "transaction.timeout.ms")):
        with pytest.raises(DmSourceError, match=message):
            write_options({**base, **bad})


def test_isolation_level_read_option() -> None:
    assert not read_options(BASE, streaming=False).read_committed
    assert read_options({**BASE, "kafka.isolation.level": "read_committed"}, streaming=True).read_committed
    with pytest.raises(DmSourceError, match="read_uncommitted or read_committed"):
        read_options({**BASE, "kafka.isolation.level": "committed"}, streaming=False)


def test_rate_limit_shares_in_proportion_like_spark() -> None:
    start = {("a", 0): 0, ("a", 1): 100}
    latest = {("a", 0): 900, ("a", 1): 200}
    assert rate_limit(start, latest, 2000) == latest
    limited = rate_limit(start, latest, 100)
    assert limited == {("a", 0): 90, ("a", 1): 110}
    # a partition with less than one record's share still moves (ceil below 1)
    assert rate_limit({("a", 0): 0, ("a", 1): 0}, {("a", 0): 1000, ("a", 1): 1}, 10)[("a", 1)] == 1


def test_split_covers_each_range_exactly() -> None:
    ranges = [(("a", 0), 0, 1000), (("a", 1), 10, 20), (("a", 2), 5, 5)]
    pieces = split(ranges, 8)
    assert len(pieces) >= 8
    for tp, start, end in ranges:
        mine = sorted((a, b) for t, a, b in pieces if t == tp)
        covered = [o for a, b in mine for o in range(a, b)]
        assert covered == list(range(start, end))
    assert split(ranges, None) == ranges[:2]


def test_check_lost() -> None:
    assert check_lost(("a", 0), 10, 5, fail=True) == 10
    assert check_lost(("a", 0), 3, 5, fail=False) == 5
    with pytest.raises(DmSourceError, match=r"a-0: offsets 3\.\.4 were deleted"):
        check_lost(("a", 0), 3, 5, fail=True)
