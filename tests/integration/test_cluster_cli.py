"""`dm up` runs a controller and brokers, `dm topics describe` shows replicas and ISR, Ctrl-C
stops everything."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from harness import consecutive_free_ports, free_port
from harness import run_dm as dm

pytestmark = pytest.mark.timeout(120)


def test_dm_up_runs_a_replicated_cluster_and_stops_on_ctrl_c(tmp_path):
    port, http = consecutive_free_ports(2), consecutive_free_ports(2)
    up = subprocess.Popen([sys.executable, "-m", "dm_broker.cli", "up", "--brokers", "2", "--data-dir",
                           str(tmp_path), "--port", str(port), "--http-port", str(http), "--controller-port",
                           str(free_port())], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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
