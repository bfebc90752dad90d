"""@platformatic/kafka, a Kafka client written from the protocol in TypeScript for Kafka 3.5 to 4.2 (neither
librdkafka, the Java client nor KafkaJS), driven through tests/node/platformatic_client.mjs (node_clients.py
runs it). It speaks the newest versions of most APIs, the KIP-848 consumer protocol among them, and names
producer 0 epoch 0 in its first InitProducerId, which found dm handing one producer id to two producers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from node_clients import NodeClient

if TYPE_CHECKING:
    from secure_clients import Credentials

PLATFORMATIC_VERSION = "2.12.1"  # scripts/install-tools.sh installs this one


def security(creds: Credentials) -> dict[str, Any]:
    """Credentials in @platformatic/kafka's spelling (Node's TLS options, SASL mechanism names as Kafka's)."""
    spec: dict[str, Any] = {}
    if creds.protocol in ("SSL", "SASL_SSL"):
        spec["tls"] = {"ca": str(creds.ca), "cert": str(creds.cert) if creds.cert else None,
                       "key": str(creds.key) if creds.key else None}
    if creds.mechanism:
        spec["sasl"] = {"mechanism": creds.mechanism, "username": creds.username, "password": creds.password}
    return spec


PLATFORMATIC = NodeClient("@platformatic/kafka", PLATFORMATIC_VERSION, "platformatic_client.mjs",
                          "platformatic-kafka", "DM_PLATFORMATIC_DIR", security)
run = PLATFORMATIC.run


def platformatic_round_trip(bootstrap: str, creds: Credentials, topic: str, values: list[bytes]) -> list[bytes]:
    """secure_clients.ROUND_TRIPS's shape: produce `values` (acks=all), read them back in a group."""
    got = run("roundTrip", bootstrap, creds, topic=topic, values=[v.decode() for v in values])
    return [v.encode() for v in got["values"]]
