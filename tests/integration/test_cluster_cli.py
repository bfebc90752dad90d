"""`dm up` runs a controller and brokers, `dm topics describe` shows replicas and ISR, Ctrl-C
stops everything."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from harness import consecutive_free_ports, free_port, reserve
from harness import run_dm as dm

pytestmark = pytest.mark.timeout(120)


def test_dm_up_runs_a_replicated_cluster_and_stops_on_ctrl_c(tmp_path):
    port, http, rest = consecutive_free_ports(2), consecutive_free_ports(2), consecutive_free_ports(2)
    up = subprocess.Popen([sys.executable, "-m", "dm_broker.cli", "up", "--brokers", "2", "--data-dir",
                           str(tmp_path), "--port", str(port), "--http-port", str(http), "--rest-port", str(rest),
                           "--controller-port", str(free_port())],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert up.stdout is not None
        banner = ""
        deadline = time.monotonic() + 60
        while "Press Ctrl-C" not in banner and time.monotonic() < deadline:
            banner += up.stdout.readline()
        assert f"127.0.0.1:{port},127.0.0.1:{port + 1}" in banner
        b = ["--bootstrap", f"127.0.0.1:{port}"]
        created = dm("topics", "create", "rep", "--partitions", "2", "--replication-factor", "2", *b)
        assert created.returncode == 0, created.stderr
        described = dm("topics", "describe", "rep", *b).stdout
        rows = [line for line in described.splitlines() if line.startswith("│")]
        assert len(rows) == 2 and all("0,1" in r or "1,0" in r for r in rows)
        assert dm("produce", "rep", *b, stdin="a\nb\nc\n").returncode == 0
        got = dm("consume", "rep", "--from-beginning", "--exit-at-end", "--timeout", "30", *b)
        assert sorted(got.stdout.split()) == ["a", "b", "c"]
    finally:
        up.send_signal(signal.SIGINT)
        rest = up.communicate(timeout=60)[0]
    assert up.returncode == 0
    assert "dm cluster stopped." in rest
    leftovers = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert leftovers == []


def test_dm_up_passes_a_secured_server_properties_to_every_broker(tmp_path):
    """`dm up --config`: one Kafka server.properties for all brokers, {port}/{port+N} filled in per
    broker; the CLI reaches the SASL listener with --command-config."""
    port = next(p for p in iter(lambda: consecutive_free_ports(2), None) if reserve([p + 500, p + 501]))
    config = tmp_path / "server.properties"
    config.write_text(
        "listeners=PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{port+500}\n"
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT\n"
        "inter.broker.listener.name=PLAINTEXT\n"
        "sasl.enabled.mechanisms=PLAIN\n"
        "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
        "required \\\n    user_admin=\"admin-pw\";\n"
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n"
        "super.users=User:ANONYMOUS;User:admin\n")
    client = tmp_path / "client.properties"
    client.write_text(  # a Java client's client.properties, as Kafka's tools take it
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=org.apache.kafka.common.security"
        ".plain.PlainLoginModule required username=\"admin\" password=\"admin-pw\";\n")
    up = subprocess.Popen([sys.executable, "-m", "dm_broker.cli", "up", "--brokers", "2", "--data-dir",
                           str(tmp_path / "data"), "--port", str(port), "--http-port", "-1", "--rest-port", "-1",
                           "--controller-port", str(free_port()), "--config", str(config)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        banner = ""
        deadline = time.monotonic() + 60
        while "Press Ctrl-C" not in banner and time.monotonic() < deadline:
            banner += up.stdout.readline()  # type: ignore[union-attr]
        assert "Press Ctrl-C" in banner, banner
        sasl = ["--bootstrap", f"127.0.0.1:{port + 500},127.0.0.1:{port + 501}", "--command-config", str(client)]
        created = dm("topics", "create", "sec", "--partitions", "2", "--replication-factor", "2", *sasl)
        assert created.returncode == 0, created.stderr
        assert dm("produce", "sec", *sasl, stdin="x\ny\n").returncode == 0
        got = dm("consume", "sec", "--from-beginning", "--exit-at-end", "--timeout", "30", *sasl)
        assert sorted(got.stdout.split()) == ["x", "y"], got.stderr
        anonymous = dm("topics", "list", "--bootstrap", f"127.0.0.1:{port + 500}", timeout=60)
        assert anonymous.returncode != 0  # no credentials: the SASL listener does not answer
    finally:
        up.send_signal(signal.SIGINT)
        up.communicate(timeout=60)
    assert up.returncode == 0
    assert "admin-pw" in (tmp_path / "data" / "broker-0.properties").read_text()
    assert oct((tmp_path / "data" / "broker-0.properties").stat().st_mode & 0o777) == "0o600"
