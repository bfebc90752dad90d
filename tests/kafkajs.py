"""KafkaJS, a Kafka client implemented from the protocol in JavaScript (neither librdkafka nor the Java
client), driven through tests/node/kafkajs_client.js. scripts/install-tools.sh installs Node.js and the
pinned KafkaJS into the test tools' cache; without them these tests skip, saying so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from secure_clients import Credentials

KAFKAJS_VERSION = "2.2.4"  # scripts/install-tools.sh installs this one
SCRIPT = Path(__file__).parent / "node" / "kafkajs_client.js"


class KafkaJsFailed(Exception):
    """The client's scenario threw: its message and stack."""


def install_dir() -> Path:
    return Path(os.environ.get("DM_KAFKAJS_DIR", Path.home() / ".cache" / "dm-testbed" / "kafkajs"))


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


def command(scenario: str, bootstrap: str, creds: Credentials | None, inputs: dict[str, Any]) -> list[str]:
    """The node command line of a scenario; skips the test when Node.js or KafkaJS is missing."""
    node = shutil.which("node")
    if node is None or not (install_dir() / "node_modules" / "kafkajs").is_dir():
        pytest.skip(f"KafkaJS {KAFKAJS_VERSION} or Node.js is not installed (scripts/install-tools.sh puts it "
                    f"under {install_dir()})")
    spec = {"scenario": scenario, "brokers": bootstrap.split(","), **(security(creds) if creds else {}), **inputs}
    return [node, str(SCRIPT), json.dumps(spec)]


def environment() -> dict[str, str]:
    return {**os.environ, "NODE_PATH": str(install_dir() / "node_modules")}


def start(scenario: str, bootstrap: str, creds: Credentials | None = None, **inputs: Any) -> subprocess.Popen[str]:
    """A scenario left running, its stdout a pipe of JSON lines (produceUntilStopped)."""
    return subprocess.Popen(command(scenario, bootstrap, creds, inputs), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=environment())


def run(scenario: str, bootstrap: str, creds: Credentials | None = None, timeout: float = 120,
        **inputs: Any) -> dict[str, Any]:
    done = subprocess.run(command(scenario, bootstrap, creds, inputs), capture_output=True, text=True,
                          timeout=timeout, env=environment())
    if done.returncode != 0:
        raise KafkaJsFailed(done.stderr.strip()[-3000:])
    return json.loads(done.stdout)


def kafkajs_round_trip(bootstrap: str, creds: Credentials, topic: str, values: list[bytes]) -> list[bytes]:
    """secure_clients.ROUND_TRIPS's shape: produce `values` (acks=all), read them back in a group."""
    got = run("roundTrip", bootstrap, creds, topic=topic, values=[v.decode() for v in values])
    return [v.encode() for v in got["values"]]
