"""KafkaJS, a Kafka client implemented from the protocol in JavaScript (neither librdkafka nor the Java
client), driven through tests/node/kafkajs_client.js (node_clients.py runs it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from node_clients import NodeClient

if TYPE_CHECKING:
    from secure_clients import Credentials

KAFKAJS_VERSION = "2.2.4"  # scripts/install-tools.sh installs this one


def security(creds: Credentials) -> dict[str, Any]:
    """Credentials in KafkaJS's spelling."""
    spec: dict[str, Any] = {}
    if creds.protocol in ("SSL", "SASL_SSL"):
        spec["ssl"] = {"ca": str(creds.ca), "cert": str(creds.cert) if creds.cert else None,
                       "key": str(creds.key) if creds.key else None}
    if creds.mechanism:
        spec["sasl"] = {"mechanism": creds.mechanism.lower(), "username": creds.username,
                        "password": creds.password}
    return spec


KAFKAJS = NodeClient("kafkajs", KAFKAJS_VERSION, "kafkajs_client.js", "kafkajs", "DM_KAFKAJS_DIR", security)
run = KAFKAJS.run


def kafkajs_round_trip(bootstrap: str, creds: Credentials, topic: str, values: list[bytes]) -> list[bytes]:
    """secure_clients.ROUND_TRIPS's shape: produce `values` (acks=all), read them back in a group."""
    got = run("roundTrip", bootstrap, creds, topic=topic, values=[v.decode() for v in values])
    return [v.encode() for v in got["values"]]
