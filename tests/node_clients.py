"""Kafka clients written in JavaScript (KafkaJS, @platformatic/kafka), driven by a script of scenarios each
under tests/node/. scripts/install-tools.sh installs Node.js and each pinned package into the test tools'
cache; without them a test skips, saying so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from secure_clients import Credentials

SCRIPTS = Path(__file__).parent / "node"


class NodeClientFailed(Exception):
    """The client's scenario threw: its message and stack."""


@dataclass(frozen=True)
class NodeClient:
    package: str  # the npm package, installed at `version` under `install_dir()/node_modules`
    version: str
    script: str  # under tests/node
    cache_name: str  # under ~/.cache/dm-testbed, unless `dir_variable` names another directory
    dir_variable: str
    tls_option: str  # what the client calls its TLS settings ("ssl", "tls")
    mechanism: Callable[[str], str] = str  # a SASL mechanism's name as the client spells it

    def security(self, creds: Credentials) -> dict[str, Any]:
        """The credentials in the client's spelling: TLS files by path (the script reads them), SASL."""
        spec: dict[str, Any] = {}
        if creds.protocol in ("SSL", "SASL_SSL"):
            spec[self.tls_option] = {"ca": str(creds.ca), "cert": str(creds.cert) if creds.cert else None,
                                     "key": str(creds.key) if creds.key else None}
        if creds.mechanism:
            spec["sasl"] = {"mechanism": self.mechanism(creds.mechanism), "username": creds.username,
                            "password": creds.password}
        return spec

    def install_dir(self) -> Path:
        return Path(os.environ.get(self.dir_variable, Path.home() / ".cache" / "dm-testbed" / self.cache_name))

    def command(self, scenario: str, bootstrap: str, creds: Credentials | None, inputs: dict[str, Any]) -> list[str]:
        """The node command line of a scenario; skips the test when Node.js or the package is missing."""
        node = shutil.which("node")
        modules = self.install_dir() / "node_modules"
        if node is None or not (modules / self.package).is_dir():
            pytest.skip(f"{self.package} {self.version} or Node.js is not installed (scripts/install-tools.sh puts "
                        f"it under {self.install_dir()})")
        spec = {"scenario": scenario, "brokers": bootstrap.split(","), "modules": str(modules),
                **(self.security(creds) if creds else {}), **inputs}
        return [node, str(SCRIPTS / self.script), json.dumps(spec)]

    def environment(self) -> dict[str, str]:
        return {**os.environ, "NODE_PATH": str(self.install_dir() / "node_modules")}

    def start(self, scenario: str, bootstrap: str, creds: Credentials | None = None,
              **inputs: Any) -> subprocess.Popen[str]:
        """A scenario left running, its stdout a pipe of JSON lines."""
        return subprocess.Popen(self.command(scenario, bootstrap, creds, inputs), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=self.environment())

    def run(self, scenario: str, bootstrap: str, creds: Credentials | None = None, timeout: float = 120,
            **inputs: Any) -> dict[str, Any]:
        done = subprocess.run(self.command(scenario, bootstrap, creds, inputs), capture_output=True, text=True,
                              timeout=timeout, env=self.environment())
        if done.returncode != 0:
            raise NodeClientFailed(done.stderr.strip()[-3000:])
        return json.loads(done.stdout)

    def round_trip(self, bootstrap: str, creds: Credentials, topic: str, values: list[bytes]) -> list[bytes]:
        """secure_clients.ROUND_TRIPS's shape: produce `values` (acks=all), read them back in a group (the
        script's roundTrip scenario)."""
        got = self.run("roundTrip", bootstrap, creds, topic=topic, values=[v.decode() for v in values])
        return [v.encode() for v in got["values"]]
