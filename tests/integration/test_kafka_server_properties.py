"""The thread, socket-buffer and coarse retention lines of Kafka's example server.properties start a
dm broker and mean what they mean there (issue 31): log.retention.hours is the topic default's
retention.ms, the socket buffers are applied, and records go through."""

from __future__ import annotations

import pytest
from clients import ConfluentClient, Rec
from harness import BrokerProcess

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
