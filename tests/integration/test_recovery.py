"""No retained byte is lost (ADR 0017), with real processes and clients:

- a `dm up` cluster whose controller state is deleted comes back as the same cluster: every
  acknowledged record, the same cluster id and topic ids, the consumer group's committed offsets;
- a broker volume of one cluster attached to another cluster's controller is refused, untouched;
- a log no recorded decision allows deleting is kept aside as stray, counted, reported to the
  controller, listed and deleted only by `dm strays`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from clients import committed_after_failures
from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from harness import BrokerProcess, ControllerProcess, consecutive_free_ports, free_port
from harness import run_dm as dm

pytestmark = pytest.mark.timeout(300)


class DmUp:
    """`dm up` as a subprocess, on fixed ports so a restart keeps them."""

    def __init__(self, data: Path, brokers: int) -> None:
        self.data, self.brokers = data, brokers
        self.port, self.http, self.controller_port = consecutive_free_ports(brokers), consecutive_free_ports(
            brokers), free_port()
        self.proc: subprocess.Popen[str] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "dm_broker.cli", "up", "--brokers", str(self.brokers),
                                      "--data-dir", str(self.data), "--port", str(self.port), "--http-port",
                                      str(self.http), "--controller-port", str(self.controller_port),
                                      "--rest-port", "-1"],  # its default ports met another dm up's once
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out = ""
        deadline = time.monotonic() + 90
        assert self.proc.stdout is not None
        while "Press Ctrl-C" not in out:
            line = self.proc.stdout.readline()
            if not line or time.monotonic() > deadline:
                self.stop()  # nothing left behind
                raise AssertionError(f"dm up did not start:\n{out}")
            out += line

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.communicate(timeout=90)

    def log(self, name: str) -> str:
        return (self.data / f"{name}.log").read_text(errors="replace")


def read_all(bootstrap: str, topic: str, group: str, expected: int, commit: bool = False) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 90
    while len(got) < expected and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg.value())
    if commit:
        consumer.commit(asynchronous=False)
    consumer.close()
    return got


def describe(bootstrap: str, topic: str) -> tuple[str, str]:
    """(cluster id, topic id) as a Kafka client sees them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    cluster = admin.describe_cluster().result(30)
    topics = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
    return cluster.cluster_id, str(topics.topic_id)


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    offsets = committed_after_failures(consumer, [TopicPartition(topic, p) for p in range(partitions)])
    consumer.close()
    return sum(max(tp.offset, 0) for tp in offsets)


def test_a_dm_up_cluster_whose_controller_state_is_deleted_comes_back_whole(tmp_path: Path) -> None:
    cluster = DmUp(tmp_path / "data", 3)
    cluster.start()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("orders", 3, 3, config={"min.insync.replicas": "2"})])["orders"].result(30)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
        for i in range(1000):
            producer.produce("orders", key=b"k%d" % i, value=b"v%d" % i)
        assert producer.flush(60) == 0
        assert len(read_all(cluster.bootstrap, "orders", "billing", 1000, commit=True)) == 1000
        before = describe(cluster.bootstrap, "orders")
        offsets_id = describe(cluster.bootstrap, "__consumer_offsets")[1]
        assert committed(cluster.bootstrap, "billing", "orders", 3) == 1000
    finally:
        cluster.stop()

    shutil.rmtree(tmp_path / "data" / "controller" / "controller")  # the controller's whole state
    cluster.start()
    try:
        assert describe(cluster.bootstrap, "orders") == before, "the same cluster id and topic id"
        assert describe(cluster.bootstrap, "__consumer_offsets")[1] == offsets_id
        assert committed(cluster.bootstrap, "billing", "orders", 3) == 1000, "the group's committed offsets"
        got = read_all(cluster.bootstrap, "orders", f"fresh-{uuid.uuid4().hex[:6]}", 1000)
        assert sorted(got) == sorted(b"v%d" % i for i in range(1000))
        assert "recovering its topics from what its brokers hold" in cluster.log("controller")
        for i in range(3):
            assert not list((tmp_path / "data" / f"broker-{i}").glob("*-stray")), f"broker {i} set nothing aside"
            assert "deleting" not in cluster.log(f"broker-{i}").lower()
        # And it takes new writes under the old identity.
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        producer.produce("orders", value=b"after")
        assert producer.flush(30) == 0
    finally:
        cluster.stop()


def tree_digest(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file() and p.name != ".lock"}


def test_a_volume_of_another_cluster_is_refused_untouched(tmp_path: Path) -> None:
    a_controller = ControllerProcess(tmp_path / "a-controller")
    a_broker = BrokerProcess(tmp_path / "a-broker", controller_url=a_controller.url)
    try:
        a_controller.start()
        a_broker.start()
        assert dm("topics", "create", "kept", "--bootstrap", a_broker.bootstrap).returncode == 0
        assert dm("produce", "kept", "--bootstrap", a_broker.bootstrap, stdin="one\ntwo\n").returncode == 0
    finally:
        a_broker.stop()
        a_controller.stop()
    meta = (tmp_path / "a-broker" / "meta.properties").read_text()
    assert "cluster.id=" in meta and "node.id=0" in meta and "directory.id=" in meta

    b_controller = ControllerProcess(tmp_path / "b-controller")
    b_broker = BrokerProcess(tmp_path / "b-broker", controller_url=b_controller.url)
    try:
        b_controller.start()
        b_broker.start()  # cluster B exists
        before = tree_digest(tmp_path / "a-broker")
        stranger = BrokerProcess(tmp_path / "a-broker", controller_url=b_controller.url, node_id=0)
        stranger.port = free_port()
        proc = subprocess.run(stranger.command(), capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0
        assert "INCONSISTENT_CLUSTER_ID" in proc.stderr and "no file was changed" in proc.stderr, proc.stderr[-2000:]
        assert tree_digest(tmp_path / "a-broker") == before, "not a byte of the volume changed"
        # A volume of another broker of the same cluster is refused too.
        b_broker.stop()
        wrong_node = BrokerProcess(tmp_path / "b-broker", controller_url=b_controller.url, node_id=1)
        proc = subprocess.run(wrong_node.command(), capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0 and "belongs to broker 0" in proc.stderr, proc.stderr[-2000:]
    finally:
        b_broker.stop()
        b_controller.stop()


def create_with_assignment(bootstrap: str, topic: str, assignment: list[list[int]]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the future resolves
    new = NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment)
    admin.create_topics([new])[topic].result(30)


def test_a_log_the_metadata_does_not_name_is_kept_aside_and_reported(tmp_path: Path) -> None:
    overrides = {"broker.session.timeout.ms": 2000}
    controller = ControllerProcess(tmp_path / "controller", overrides)
    brokers = [BrokerProcess(tmp_path / f"broker-{i}", overrides, node_id=i, controller_url=controller.url)
               for i in range(2)]
    try:
        controller.start()
        for b in brokers:
            b.start()
        create_with_assignment(brokers[0].bootstrap, "t", [[1]])
        assert dm("produce", "t", "--bootstrap", brokers[0].bootstrap, stdin="a\nb\nc\n").returncode == 0
    finally:
        for b in brokers:
            b.stop()
        controller.stop()

    # The controller's state is lost and only broker 0 comes back before a topic "t" is made anew: broker 1's
    # old t-0 (another topic id, never deleted through the controller) must not be deleted.
    shutil.rmtree(tmp_path / "controller" / "controller")
    try:
        controller.start()
        brokers[0].start()
        time.sleep(2.5)  # the recovery window of a controller that knows no broker count: one session timeout
        create_with_assignment(brokers[0].bootstrap, "t", [[0]])
        brokers[1].start()
        strays = list((tmp_path / "broker-1").glob("t-0.*-stray"))
        deadline = time.monotonic() + 30
        while not strays and time.monotonic() < deadline:
            time.sleep(0.2)
            strays = list((tmp_path / "broker-1").glob("t-0.*-stray"))
        assert len(strays) == 1, list((tmp_path / "broker-1").iterdir())
        assert any(f.suffix == ".log" and f.stat().st_size > 0 for f in strays[0].iterdir()), "the records are there"
        assert "kept aside" in brokers[1].log_tail(200)
        wait = time.monotonic() + 30
        while brokers[1].metric("dm_stray_logs") != 1 and time.monotonic() < wait:
            time.sleep(0.2)
        assert brokers[1].metric("dm_stray_logs") == 1 and brokers[1].metric("dm_stray_bytes") > 0
        def reported() -> dict[int, list[str]]:
            metadata = json.loads(urllib.request.urlopen(f"{controller.url}/v1/metadata", timeout=10).read())
            return {b["node_id"]: b["stray_logs"] for b in metadata["brokers"]}

        wait = time.monotonic() + 10  # the next heartbeat carries it
        while reported()[1] != [strays[0].name] and time.monotonic() < wait:
            time.sleep(0.2)
        assert reported() == {0: [], 1: [strays[0].name]}

        listed = dm("strays", "list", "--data-dir", str(tmp_path / "broker-1"))
        assert strays[0].name in listed.stdout
        deleted = dm("strays", "delete", strays[0].name, "--data-dir", str(tmp_path / "broker-1"))
        assert deleted.returncode == 0 and not strays[0].exists()
        audit = (tmp_path / "broker-1" / "__dm_meta" / "stray-deletions.log").read_text()
        assert strays[0].name in audit and "dm strays delete" in audit
        assert dm("strays", "delete", "nothing-stray", "--data-dir", str(tmp_path / "broker-1")).returncode != 0
    finally:
        for b in brokers:
            b.stop()
        controller.stop()
