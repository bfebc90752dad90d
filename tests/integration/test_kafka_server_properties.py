"""Kafka's example server.properties starts a dm broker (issue 31): its thread, socket-buffer and coarse
retention lines mean what they mean there (log.retention.hours is the topic default's retention.ms),
and the whole KRaft file of Kafka 4 — roles, quorum, a CONTROLLER listener, recovery threads, share
coordinator lines — is accepted as a file, with the CONTROLLER listener left unopened and the lines
without effect named in the broker's log."""

from __future__ import annotations

import socket

import pytest
from clients import ConfluentClient, Rec
from harness import BrokerProcess, free_port

pytestmark = pytest.mark.timeout(120)
KAFKA_LINES = {"num.network.threads": 3, "num.io.threads": 8, "socket.send.buffer.bytes": 102400,
               "socket.receive.buffer.bytes": 102400, "log.retention.hours": 168, "log.roll.hours": 24,
               "log.segment.bytes": 1073741824, "log.retention.check.interval.ms": 300000}


def test_kafkas_example_lines_start_a_broker(tmp_path, topic_name):
    from confluent_kafka.admin import AdminClient, ConfigResource

    with BrokerProcess(tmp_path / "data", KAFKA_LINES) as broker:
        client = ConfluentClient(broker.bootstrap)
        client.create_topic(topic_name, 1)
        client.produce(topic_name, [Rec(None, b"v%d" % i) for i in range(10)])
        assert [g.value for g in client.consume(topic_name, 10)] == [b"v%d" % i for i in range(10)]
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        resource = ConfigResource("topic", topic_name)
        configs = admin.describe_configs([resource])[resource].result(15)
        assert configs["retention.ms"].value == str(168 * 3_600_000)
        assert configs["segment.ms"].value == str(24 * 3_600_000)


# Apache Kafka 4.1's config/server.properties (comments shortened), with the ports and directory filled in.
KAFKA_4_SERVER_PROPERTIES = """
############################# Server Basics #############################
# The role of this server. Setting this puts us in KRaft mode
process.roles=broker,controller
# The node id associated with this instance's roles
node.id=1
# List of controller endpoints used connect to the controller cluster
controller.quorum.bootstrap.servers=localhost:{controller_port}

############################# Socket Server Settings #############################
listeners=PLAINTEXT://:{port},CONTROLLER://:{controller_port}
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:{port},CONTROLLER://localhost:{controller_port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600

############################# Log Basics #############################
log.dirs={log_dirs}
num.partitions=1
num.recovery.threads.per.data.dir=1

############################# Internal Topic Settings  #############################
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1

############################# Log Retention Policy #############################
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


def test_kafka_4s_kraft_server_properties_start_a_broker(tmp_path, topic_name):
    port, controller_port = free_port(), free_port()
    config = tmp_path / "server.properties"
    config.write_text(KAFKA_4_SERVER_PROPERTIES.format(port=port, controller_port=controller_port,
                                                       log_dirs=tmp_path / "kraft-combined-logs"))
    # The harness gives --data-dir or --port unless these are set: the same values as the file's.
    broker = BrokerProcess(tmp_path / "data", {"log.dirs": tmp_path / "kraft-combined-logs",
                                               "listeners": f"PLAINTEXT://:{port},CONTROLLER://:{controller_port}"},
                           config_file=config)
    broker.port = port
    with broker:
        client = ConfluentClient(f"localhost:{port}")
        client.create_topic(topic_name, 3)
        client.produce(topic_name, [Rec(None, b"k%d" % i) for i in range(30)])
        assert sorted(g.value for g in client.consume(topic_name, 30)) == sorted(b"k%d" % i for i in range(30))
        with socket.socket() as s:  # KRaft's CONTROLLER listener belongs to a quorum dm does not have
            assert s.connect_ex(("127.0.0.1", controller_port)) != 0
        log = broker.log_path.read_text()
        for line in ("controller.quorum.bootstrap.servers", "num.network.threads"):
            assert f"accepted without effect: {line}" in log
        # the share coordinator's topic settings configure __share_group_state (share groups, KIP-932)
        assert "accepted without effect: share.coordinator" not in log


def test_a_controller_only_role_is_refused_clearly(tmp_path):
    from harness import run_dm

    out = run_dm("broker", "--data-dir", str(tmp_path / "data"), "--override", "process.roles=controller")
    assert out.returncode != 0 and "dm controller" in out.stderr
