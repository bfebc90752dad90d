"""What requests may make a broker hold in memory (ADR 0044).

A frame's first four bytes used to make the broker allocate (and zero) a buffer of the size they
declared: forty connections that each declared 100 MB and sent 8 KB took 4 GB. Now a buffer follows the
bytes that arrived, and Kafka's `queued.max.request.bytes` bounds what requests reserve at once: while it
is used up no connection starts a new request, and the clients' requests wait (nothing is refused or lost)
until memory is given back."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from clients import ConfluentClient, Deliveries
from confluent_kafka import Producer
from dm_broker.malloc_tuning import is_glibc
from dm_broker.tools.client import produce_waiting
from group_clients import wait_for
from harness import BrokerProcess
from test_fuzz_auth import rss_mb

pytestmark = pytest.mark.timeout(180)
MiB = 1 << 20


@contextmanager
def declared(port: int, count: int, size: int, sent: int) -> Iterator[list[socket.socket]]:
    """count connections that each declare a request of `size` bytes and send `sent` bytes of it."""
    socks = []
    try:
        for _ in range(count):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(struct.pack(">i", size) + b"\0" * sent)
            socks.append(s)
        yield socks
    finally:
        for s in socks:
            s.close()


def read_back(bootstrap: str, topic: str, count: int) -> list[bytes]:
    return [got.value for got in ConfluentClient(bootstrap).consume(topic, count)]


def test_declared_sizes_cost_no_memory_until_their_bytes_arrive(tmp_path):
    # Kafka's 100 MiB limit (dm's default is 16 MiB): forty such frames declared at once
    with BrokerProcess(tmp_path / "data", {"socket.request.max.bytes": 100 * MiB}) as broker:
        before = rss_mb(broker.proc.pid)
        with declared(broker.port, 40, 100 * MiB, 8192):
            wait_for(lambda: broker.metric("dm_request_memory_used_bytes") == 40 * 100 * MiB, 30,
                     what="forty requests reserved")
            grown = rss_mb(broker.proc.pid) - before
        # Before ADR 0044: 4,000 MB (a zeroed 100 MB buffer per connection); now at most 1 MiB each.
        assert grown < 200, f"the broker grew by {grown:.0f} MB for 320 KB received"
        wait_for(lambda: broker.metric("dm_request_memory_used_bytes") == 0, 30, what="memory given back")
        assert broker.alive()


def test_a_used_up_request_memory_holds_clients_back_until_it_is_given_back(tmp_path):
    limits = {"socket.request.max.bytes": 4 * MiB, "queued.max.request.bytes": 4 * MiB}
    with BrokerProcess(tmp_path / "data", limits) as broker:
        ConfluentClient(broker.bootstrap).create_topic("held", 1)
        assert broker.metric("dm_request_memory_limit_bytes") == 4 * MiB
        values = [f"{i:06d}".encode() * 1500 for i in range(200)]  # 9 KB each
        with declared(broker.port, 3, 3 * MiB, MiB):
            # Two requests are admitted (the pool is not strict: 3 MiB < 4, then 6 MiB), the third waits.
            wait_for(lambda: broker.metric("dm_request_memory_waiting_connections") >= 1, 30,
                     what="a connection waiting for memory")
            assert broker.metric("dm_request_memory_used_bytes") == 6 * MiB
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "acks": "all",
                                 "message.timeout.ms": 120000})
            deliveries = Deliveries()
            for value in values:
                producer.produce("held", value, on_delivery=deliveries)
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                producer.poll(0.2)
            assert deliveries.acked == [] and deliveries.failed == []  # held back, not refused
            assert broker.metric("dm_request_memory_waiting_connections") >= 2
        # The connections that held the memory went: the producer's requests go through.
        assert producer.flush(60) == 0
        assert deliveries.failed == [] and deliveries.values == values
        assert read_back(broker.bootstrap, "held", len(values)) == values
        wait_for(lambda: broker.metric("dm_request_memory_used_bytes") == 0, 30, what="memory given back")
        assert broker.metric("dm_request_memory_waiting_connections") == 0
        assert broker.metric("dm_request_memory_depleted_seconds_total") > 2


def test_a_request_larger_than_what_is_left_still_goes_through(tmp_path):
    limits = {"socket.request.max.bytes": 4 * MiB, "queued.max.request.bytes": 4 * MiB}
    with BrokerProcess(tmp_path / "data", limits) as broker:
        ConfluentClient(broker.bootstrap).create_topic("large", 1)
        with declared(broker.port, 1, 3 * MiB + MiB // 2, 1024):
            wait_for(lambda: broker.metric("dm_request_memory_used_bytes") == 3 * MiB + MiB // 2, 30,
                     what="3.5 MiB reserved")
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
            value = b"v" * 900_000  # more than the 0.5 MiB left
            producer.produce("large", value)
            assert producer.flush(30) == 0
            assert read_back(broker.bootstrap, "large", 1) == [value]


def test_a_tls_client_held_back_by_request_memory_goes_on_when_it_is_given_back(tmp_path):
    """The same over TLS, whose transport hands the frames over differently (its own read buffer, paused
    and resumed by the SSL protocol)."""
    from secure import Pki, secure_broker

    ca = Pki(tmp_path / "pki")
    broker, ports = secure_broker(tmp_path / "data", {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}, {
        "ssl.keystore.location": ca.server(), "socket.request.max.bytes": 4 * MiB,
        "queued.max.request.bytes": 4 * MiB})
    with broker:
        ConfluentClient(broker.bootstrap).create_topic("tls-held", 1)
        values = [f"{i:06d}".encode() * 10_000 for i in range(40)]  # 60 KB each: frames with buffers of their own
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{ports['SSL']}", "security.protocol": "SSL",
                             "ssl.ca.location": str(ca.ca_file), "linger.ms": 0, "acks": "all",
                             "message.timeout.ms": 120000})
        producer.produce("tls-held", b"first")
        assert producer.flush(30) == 0  # connected and warm before the memory is taken
        deliveries = Deliveries()
        with declared(broker.port, 3, 3 * MiB, MiB):
            wait_for(lambda: broker.metric("dm_request_memory_waiting_connections") >= 1, 30,
                     what="a connection waiting for memory")
            for value in values:
                producer.produce("tls-held", value, on_delivery=deliveries)
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                producer.poll(0.2)
            assert deliveries.acked == []
        assert producer.flush(60) == 0
        assert deliveries.failed == [] and deliveries.values == values
        assert read_back(broker.bootstrap, "tls-held", len(values) + 1) == [b"first", *values]


def minor_faults(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def produce_megabyte_batches(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "acks": "1", "max.in.flight.requests.per.connection": 5})
    deliveries = Deliveries()
    value = b"v" * 1024
    for _ in range(count):
        produce_waiting(producer, topic, value, partition=0, on_delivery=deliveries)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not deliveries.failed and len(deliveries.acked) == count, deliveries.failed[:3]


@pytest.mark.skipif(not is_glibc(), reason="the thresholds are glibc's")
@pytest.mark.parametrize("environ, bound", [
    # dm's own thresholds (ADR 0049): the heap keeps the request buffers once it has grown.
    ({}, lambda per_record: per_record < 0.05),
    # glibc's starting thresholds, fixed: every megabyte buffer is a fresh mmap, 256 faults per MiB.
    ({"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}, lambda per_record: per_record > 0.15),
], ids=["dm", "glibc-start-values"])
def test_produced_megabyte_requests_reuse_the_heap(tmp_path, monkeypatch, environ, bound):
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with BrokerProcess(tmp_path / "data") as broker:
        ConfluentClient(broker.bootstrap).create_topic("heap", 1)
        produce_megabyte_batches(broker.bootstrap, "heap", 20_000)  # the heap grows to its working size
        before = minor_faults(broker.proc.pid)
        produce_megabyte_batches(broker.bootstrap, "heap", 40_000)
        per_record = (minor_faults(broker.proc.pid) - before) / 40_000
        assert bound(per_record), f"{per_record:.3f} minor faults per produced 1 KiB record"
        expected = "left to the environment" if environ else "mmap threshold 16 MiB, trim threshold 64 MiB"
        assert f"malloc: {expected}" in broker.log_path.read_text()
