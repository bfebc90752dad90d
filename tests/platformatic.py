"""@platformatic/kafka, a Kafka client written from the protocol in TypeScript for Kafka 3.5 to 4.2 (neither
librdkafka, the Java client nor KafkaJS), driven through tests/node/platformatic_client.mjs (node_clients.py
runs it). It speaks the newest versions of most APIs, the KIP-848 consumer protocol among them, and names
producer 0 epoch 0 in its first InitProducerId, which found dm handing one producer id to two producers."""

from __future__ import annotations

from node_clients import NodeClient

PLATFORMATIC_VERSION = "2.12.1"  # scripts/install-tools.sh installs this one

# Node's TLS options under "tls"; SASL mechanisms named as Kafka names them
PLATFORMATIC = NodeClient("@platformatic/kafka", PLATFORMATIC_VERSION, "platformatic_client.mjs",
                          "platformatic-kafka", "DM_PLATFORMATIC_DIR", "tls")
run = PLATFORMATIC.run
