"""The property table's promises: secrets are marked as Kafka's PASSWORD type; the controller refuses to
listen off loopback without a token."""

from __future__ import annotations

import re

import pytest

SECRET_LOOKING = re.compile(r"password|secret|token|jaas|\.key$|\.key\.|certificate|credential|private")


def test_every_secret_looking_property_is_sensitive():
    """Kafka's PASSWORD type: DescribeConfigs returns null with is_sensitive, and dm never logs it. A new
    property whose name looks like a secret fails here until it is marked (or named otherwise)."""
    from dm_broker.config import BROKER_PROPERTIES, TOPIC_ONLY_PROPERTIES, _listener_scoped

    unmarked = [p.name for p in [*BROKER_PROPERTIES.values(), *TOPIC_ONLY_PROPERTIES]
                if SECRET_LOOKING.search(p.name) and not p.secret]
    assert unmarked == []
    for scoped in ("listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config", "listener.name.ssl.ssl.keystore.password",
                   "listener.name.controller.ssl.keystore.key"):
        assert _listener_scoped(scoped).secret, scoped


def test_a_controller_off_loopback_needs_a_token():
    from dm_broker.app import open_controller_refusal

    assert open_controller_refusal("127.0.0.1", "") is None
    assert open_controller_refusal("::1", "") is None
    assert open_controller_refusal("localhost", "") is None
    assert "without a token" in open_controller_refusal("0.0.0.0", "")
    assert "without a token" in open_controller_refusal("10.1.2.3", "")
    assert open_controller_refusal("0.0.0.0", "t0ken") is None


def test_kafkas_coarser_spellings_and_thread_settings():
    """log.retention.hours/minutes and log.roll.hours mean what they mean in Kafka (the finest spelling
    given wins); num.io.threads and num.network.threads are accepted (a Kafka server.properties has them)."""
    from dm_broker.config import BrokerConfig, ConfigError

    def build(**values):
        return BrokerConfig.build({k.replace("_", "."): v for k, v in values.items()}, environ={})

    assert build(log_retention_hours="24")["log.retention.ms"] == 24 * 3_600_000
    assert build(log_retention_hours="24", log_retention_minutes="30")["log.retention.ms"] == 30 * 60_000
    assert build(log_retention_hours="24", log_retention_ms="5000")["log.retention.ms"] == 5000
    assert build(log_retention_hours="-1")["log.retention.ms"] == -1
    assert build(log_roll_hours="2")["log.roll.ms"] == 7_200_000
    with pytest.raises(ConfigError, match=r"log\.retention\.hours"):
        build(log_retention_hours="-5")
    config = build(num_io_threads="4", num_network_threads="3", socket_send_buffer_bytes="102400",
                   socket_receive_buffer_bytes="102400")
    assert config["num.io.threads"] == 4 and config["socket.receive.buffer.bytes"] == 102400


def test_kafkas_kraft_lines_are_accepted_and_the_controller_listener_left_out():
    from dm_broker.config import BrokerConfig, ConfigError, without_effect
    from dm_broker.security.listeners import listener_setup

    config = BrokerConfig.build({
        "process.roles": "controller, broker", "controller.quorum.bootstrap.servers": "localhost:9093",
        "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093", "controller.listener.names": "CONTROLLER",
        "advertised.listeners": "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "num.recovery.threads.per.data.dir": "2", "share.coordinator.state.topic.min.isr": "1"}, environ={})
    assert config["process.roles"] == "broker,controller"
    assert [li.name for li in listener_setup(config).listeners] == ["PLAINTEXT"]
    # share.coordinator.state.topic.min.isr (in Kafka's example configs) now configures __share_group_state
    assert {line.split(" ")[0] for line in without_effect(config)} == {"controller.quorum.bootstrap.servers"}
    assert config["share.coordinator.state.topic.min.isr"] == 1
    with pytest.raises(ConfigError, match="dm controller"):
        BrokerConfig.build({"process.roles": "controller"}, environ={})
    with pytest.raises(ConfigError, match="every listener"):
        listener_setup(BrokerConfig.build({"listeners": "CONTROLLER://:9093", "controller.listener.names": "CONTROLLER",
                                           "listener.security.protocol.map": "CONTROLLER:PLAINTEXT"}, environ={}))


def test_queued_max_request_bytes_as_kafka_checks_it():
    from dm_broker.config import BrokerConfig, ConfigError

    def queued(**values: str) -> int:
        return BrokerConfig.build({k.replace("_", "."): v for k, v in values.items()},
                                  environ={})["queued.max.request.bytes"]

    assert queued() == -1  # Kafka's default: no limit
    assert queued(queued_max_request_bytes="104857600") == 100 << 20
    assert queued(queued_max_request_bytes="0") == 0  # no limit either
    with pytest.raises(ConfigError, match=r"queued\.max\.request\.bytes=1048576 must be at least "
                                          r"socket\.request\.max\.bytes=104857600"):
        queued(queued_max_request_bytes="1048576", socket_request_max_bytes="104857600")
    with pytest.raises(ConfigError, match=r"must be at least socket\.request\.max\.bytes=16777216"):
        queued(queued_max_request_bytes="1048576")  # dm's default, 16 MiB
    assert queued(queued_max_request_bytes="1048576", socket_request_max_bytes="1048576") == 1 << 20
