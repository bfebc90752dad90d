"""What a newcomer meets in the first hour: one process per data directory, read-only commands that
stay read-only, clear refusals, prompt exits on SIGTERM and Ctrl-C, and a CLI that explains itself."""

from __future__ import annotations

import argparse
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from clients import ConfluentClient, Rec
from dm_broker.cli import build_parser, parsers
from dm_broker.tools.cluster import plan_ports
from harness import BrokerProcess, consecutive_free_ports, free_port, reserve
from harness import run_dm as dm

pytestmark = pytest.mark.timeout(180)


class DmUp:
    """`dm up` in the background, waiting for its banner."""

    def __init__(self, data_dir: Path, brokers: int, port: int, *extra: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "dm_broker.cli", "up", "--brokers", str(brokers),
                                      "--data-dir", str(data_dir), "--port", str(port), *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.output = ""

    def wait_ready(self, timeout: float = 60) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while "Press Ctrl-C" not in self.output and time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line and self.proc.poll() is not None:
                raise AssertionError(f"dm up exited with {self.proc.returncode}:\n{self.output}")
            self.output += line
        return self.output

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        rest = self.proc.communicate(timeout=60)[0]
        self.output += rest
        return self.output


# -- data safety --------------------------------------------------------------------------------


def test_second_broker_on_a_data_directory_is_refused_and_a_dead_holder_is_no_obstacle(tmp_path):
    first = BrokerProcess(tmp_path / "data").start()
    second = BrokerProcess(tmp_path / "data")
    with pytest.raises(RuntimeError) as refused:
        second.start()
    assert f"is in use by process {first.proc.pid} (dm broker 0)" in str(refused.value)
    assert second.proc.returncode != 0
    first.kill()  # SIGKILL: the lock file stays, its lock dies with the process
    assert (tmp_path / "data" / ".lock").exists()
    third = BrokerProcess(tmp_path / "data").start()
    third.stop()


def test_a_data_directory_that_cannot_be_used_is_one_clear_line(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    for data, why in ((a_file, f"{a_file} is not a directory"),
                      (a_file / "below", f"{a_file / 'below'} cannot be used as a data directory: Not a directory")):
        broker = BrokerProcess(data)
        broker.log_path = tmp_path / f"{data.name}.log"
        with pytest.raises(RuntimeError) as refused:
            broker.start()
        assert broker.proc.returncode == 1
        assert f"dm: cannot start dm broker 0: {why}" in str(refused.value), refused.value
        assert "Traceback" not in str(refused.value), refused.value


def test_second_dm_up_on_a_data_directory_is_refused_and_leaves_the_first_alone(tmp_path):
    data = tmp_path / "data"
    first = DmUp(data, 1, consecutive_free_ports(2), "--http-port", "-1", "--rest-port", "-1", "--controller-port",
                 str(free_port()))
    try:
        first.wait_ready()
        logs_before = {p.name: p.read_bytes() for p in data.glob("*.log")}
        second = dm("up", "--brokers", "1", "--data-dir", str(data), "--port", str(consecutive_free_ports(2)),
                    "--http-port", "-1", "--rest-port", "-1", "--controller-port", str(free_port()), timeout=30)
        assert second.returncode != 0
        assert f"{data} is in use by process {first.proc.pid} (dm up)" in second.stderr
        assert {p.name: p.read_bytes() for p in data.glob("*.log")} == logs_before
        assert first.proc.poll() is None
    finally:
        first.stop()


def test_dm_up_says_which_port_is_taken(tmp_path):
    port = consecutive_free_ports(2)
    first = DmUp(tmp_path / "a", 1, port, "--http-port", "-1", "--rest-port", "-1", "--controller-port",
                 str(free_port()))
    try:
        first.wait_ready()
        second = dm("up", "--brokers", "1", "--data-dir", str(tmp_path / "b"), "--port", str(port),
                    "--http-port", "-1", "--rest-port", "-1", "--controller-port", str(free_port()), timeout=30)
        assert second.returncode != 0
        assert f"port {port} (broker 0) already in use" in second.stderr
        assert not list((tmp_path / "b").glob("*.log")), "nothing was started"
    finally:
        first.stop()


def test_new_data_directory_is_not_an_unclean_shutdown(tmp_path):
    broker = BrokerProcess(tmp_path / "data").start()
    assert dm("topics", "create", "t", "--bootstrap", broker.bootstrap).returncode == 0
    broker.kill()  # with a partition on disk: this one was unclean
    first_start = broker.log_path.read_text()
    assert "previous shutdown none (new data directory)" in first_start
    assert "unclean" not in first_start
    broker.start()
    broker.stop()
    assert "previous shutdown unclean" in broker.log_path.read_text()[len(first_start):]
    before = broker.log_path.read_text()
    broker.start()
    broker.stop()
    assert "previous shutdown clean" in broker.log_path.read_text()[len(before):]


# -- prompt exits ---------------------------------------------------------------------------------


def test_broker_waiting_for_an_unreachable_controller_exits_on_sigterm(tmp_path):
    log = tmp_path / "broker.log"
    dead_controller = f"http://127.0.0.1:{free_port()}"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "dm_broker.cli", "broker", "--data-dir", str(tmp_path / "d"),
                                 "--port", str(free_port()), "--http-port", "-1", "--controller", dead_controller],
                                stdout=subprocess.DEVNULL, stderr=out)
    # It waits first for the controller's cluster id (the volume check), then to register: either wait counts.
    waiting = re.compile(r"cannot (ask|register with) the controller")
    deadline = time.monotonic() + 30
    while not waiting.search(log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert waiting.search(log.read_text()), log.read_text()
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)
    assert time.monotonic() - sent < 5
    assert "stopped during start-up" in log.read_text()


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _wait_until_reading(proc: subprocess.Popen, topic: str, bootstrap: str, timeout_s: float = 60) -> None:
    """Returns once `dm consume` has printed a record: it is then past start-up (imports, signal set-up,
    assignment) and waiting in its poll loop, however slow the machine. A record written before its
    position is set is not read (it starts at the end), so one is written every half second until it is."""
    printed: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [printed.put(line) for line in proc.stdout], daemon=True).start()
    client = ConfluentClient(bootstrap)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        client.produce(topic, [Rec(None, b"ping")])
        try:
            printed.get(timeout=0.5)
            return
        except queue.Empty:
            assert proc.poll() is None, f"dm consume exited with {proc.returncode}"
    raise AssertionError(f"dm consume printed nothing in {timeout_s} s")


@pytest.mark.parametrize("started", ["from a terminal", "as a background job (SIGINT ignored by inheritance)"])
def test_ctrl_c_on_a_waiting_consumer_exits_without_a_traceback(broker, topic_name, started):
    assert dm("topics", "create", topic_name, "--bootstrap", broker.bootstrap).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "dm_broker.cli", "consume", topic_name, "--bootstrap",
                             broker.bootstrap], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_ignore_sigint if "background" in started else None)
    try:
        _wait_until_reading(proc, topic_name, broker.bootstrap)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)  # stdout is the reading thread's; stderr holds a few lines at most
        err = proc.stderr.read()
    finally:
        proc.kill()  # never left behind, whatever happened above
        proc.wait()
    assert proc.returncode == 130
    assert "Traceback" not in err and "interrupted" in err


def test_consume_from_an_offset_past_the_end_says_so(broker, topic_name):
    b = ["--bootstrap", broker.bootstrap]
    assert dm("topics", "create", topic_name, *b).returncode == 0
    assert dm("produce", topic_name, *b, stdin="a\nb\nc\n").returncode == 0
    started = time.monotonic()
    result = dm("consume", topic_name, "--partition", "0", "--offset", "40", "--max-messages", "10", *b, timeout=30)
    assert time.monotonic() - started < 20
    assert result.returncode != 0
    assert f"offset 40 is out of range for {topic_name}-0: it holds offsets 0 to 2" in result.stderr
    ok = dm("consume", topic_name, "--partition", "0", "--offset", "1", "--exit-at-end", *b)
    assert ok.returncode == 0 and ok.stdout.split() == ["b", "c"]
    no_partition = dm("consume", topic_name, "--partition", "5", "--offset", "0", *b)
    assert no_partition.returncode != 0 and "has no partition 5" in no_partition.stderr


# -- read-only commands, refusals ------------------------------------------------------------------


def test_describing_a_missing_topic_does_not_create_it(broker, topic_name):
    result = dm("topics", "describe", topic_name, "--bootstrap", broker.bootstrap)
    assert result.returncode != 0
    assert f"topic {topic_name} does not exist" in result.stderr
    listed = dm("topics", "list", "--bootstrap", broker.bootstrap).stdout.split()
    assert topic_name not in listed


def test_create_refuses_nonsense_counts_and_reports_what_it_created(broker, topic_name):
    refused = dm("topics", "create", topic_name, "--partitions", "-1", "--bootstrap", broker.bootstrap)
    assert refused.returncode == 2 and "must be at least 1" in refused.stderr
    assert topic_name not in dm("topics", "list", "--bootstrap", broker.bootstrap).stdout.split()
    created = dm("topics", "create", topic_name, "--partitions", "3", "--bootstrap", broker.bootstrap)
    assert created.stdout.strip() == f"created topic {topic_name} (3 partitions, replication factor 1)"


def test_topic_names_colliding_after_folding_are_refused(broker, topic_name):
    dotted, underscored = f"{topic_name}.x", f"{topic_name}_x"
    assert dm("topics", "create", dotted, "--bootstrap", broker.bootstrap).returncode == 0
    clash = dm("topics", "create", underscored, "--bootstrap", broker.bootstrap)
    assert clash.returncode != 0
    assert f"collides with existing topic '{dotted}'" in clash.stderr


# -- the CLI explains itself -----------------------------------------------------------------------


def test_version_and_help_for_every_option():
    from importlib.metadata import version

    assert dm("--version").stdout.strip() == f"dm {version('dm')}"
    undocumented = []
    for parser in parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if not action.help:
                undocumented.append(f"{parser.prog}: {action.dest}")
    assert undocumented == []
    assert "(default: 1)" in dm("topics", "create", "--help").stdout


def test_dm_up_moves_its_other_ports_with_port():
    assert plan_ports(9092, 3, None, None) == {
        "controller": 9990, "broker 0": 9092, "broker 0 HTTP": 8080, "broker 0 REST": 8092, "broker 1": 9093,
        "broker 1 HTTP": 8081, "broker 1 REST": 8093, "broker 2": 9094, "broker 2 HTTP": 8082, "broker 2 REST": 8094}
    second = plan_ports(9192, 3, None, None)
    assert second["controller"] == 10090 and second["broker 0 HTTP"] == 8180 and second["broker 0 REST"] == 8192
    assert set(plan_ports(9092, 3, None, None).values()).isdisjoint(second.values())
    assert "broker 0 HTTP" not in plan_ports(9092, 1, 9999, -1)
    assert "broker 0 REST" not in plan_ports(9092, 1, None, None, -1)


def test_two_local_clusters_differ_only_in_port(tmp_path):
    def derived(p: int) -> list[int]:  # the controller, HTTP and REST ports of both clusters
        return sorted({*plan_ports(p, 1, None, None).values(), *plan_ports(p + 1, 1, None, None).values()} - {p, p + 1})

    port = next(p for p in iter(lambda: consecutive_free_ports(2), None) if reserve(derived(p)))
    a = DmUp(tmp_path / "a", 1, port)
    try:
        assert f"controller http://127.0.0.1:{port - 9092 + 9990}" in a.wait_ready()
        b = DmUp(tmp_path / "b", 1, port + 1)
        try:
            banner = b.wait_ready()
            assert f"controller http://127.0.0.1:{port + 1 - 9092 + 9990}" in banner
            assert f"http://127.0.0.1:{port + 1 - 9092 + 8080}/metrics" in banner
        finally:
            b.stop()
    finally:
        a.stop()


def test_a_broker_can_wait_for_a_directory_being_released(tmp_path):
    """With log.dirs.lock.wait.ms (the operator sets it: a force-deleted pod's replacement may start
    while the old process is still being killed) the second broker waits instead of exiting."""
    first = BrokerProcess(tmp_path / "data").start()
    second = BrokerProcess(tmp_path / "data", {"log.dirs.lock.wait.ms": 20000})
    second.proc = subprocess.Popen(second.command(), stdout=subprocess.PIPE, stderr=second.log_path.open("ab"))
    deadline = time.monotonic() + 20
    while "waiting up to" not in second.log_tail() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "is in use by process" in second.log_tail()
    first.kill()
    assert second.proc.stdout is not None
    line = b""
    while not line.startswith(b"DM_READY") and time.monotonic() < deadline + 20:
        line = second.proc.stdout.readline()
    assert line.startswith(b"DM_READY")
    second.stop()


def test_dm_up_serves_the_rest_proxy_and_its_banner_recipe_works(tmp_path):
    port, rest = consecutive_free_ports(2), free_port()
    up = DmUp(tmp_path / "data", 1, port, "--http-port", "-1", "--controller-port", str(free_port()),
              "--rest-port", str(rest))
    try:
        banner = up.wait_ready()
        assert f"REST Proxy (v2): http://127.0.0.1:{rest}" in banner
        assert dm("topics", "create", "demo", "--bootstrap", f"127.0.0.1:{port}").returncode == 0
        [recipe] = [line.strip() for line in banner.splitlines() if line.strip().startswith("curl ")]
        out = subprocess.run(recipe, shell=True, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert '"offset":0' in out.stdout and '"error_code":null' in out.stdout, out.stdout
    finally:
        up.stop()
