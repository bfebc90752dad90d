"""KafkaJS, a Kafka client implemented from the protocol in JavaScript (neither librdkafka nor the Java
client), driven through tests/node/kafkajs_client.js (node_clients.py runs it)."""

from __future__ import annotations

from node_clients import NodeClient

KAFKAJS_VERSION = "2.2.4"  # scripts/install-tools.sh installs this one
KAFKAJS = NodeClient("kafkajs", KAFKAJS_VERSION, "kafkajs_client.js", "kafkajs", "DM_KAFKAJS_DIR", "ssl", str.lower)
run = KAFKAJS.run
