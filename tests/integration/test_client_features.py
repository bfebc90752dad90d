"""Idempotent retries through a response-dropping proxy, offsets by timestamp, kcat, HTTP, CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest
from clients import CLIENTS, ConfluentClient, Rec
from dm_broker.partitioners import murmur3_partition
from harness import BrokerProcess, FaultProxy

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("client_cls", CLIENTS, ids=lambda c: c.name)
def test_idempotent_producer_retry_after_lost_response_has_no_duplicates(tmp_path, topic_name, client_cls):
    broker = BrokerProcess(tmp_path / "data")
    proxy = FaultProxy(broker.port)
    # Clients only ever reach the broker through the proxy: it is the advertised address.
    broker.overrides["advertised.port"] = proxy.port
    broker.start()
    try:
        client = client_cls(f"127.0.0.1:{proxy.port}")
        client.create_topic(topic_name, 1)
        proxy.drop_responses(api_key=0, count=1)
        sent = [Rec(None, b"idem-%d" % i) for i in range(200)]
        client.produce(topic_name, sent, acks="all", idempotent=True)
        assert proxy.dropped == 1, "the fault was not injected"
        got = ConfluentClient(f"127.0.0.1:{proxy.port}").consume(topic_name, 200, timeout=10)
    finally:
        proxy.close()
        broker.stop()
    values = [g.value for g in got]
    assert sorted(values) == sorted(r.value for r in sent)
    assert len(values) == len(set(values)), "a retried batch was appended twice"


def test_list_offsets_by_timestamp(broker, topic_name):
    from confluent_kafka import Consumer, TopicPartition

    client = ConfluentClient(broker.bootstrap)
    client.create_topic(topic_name, 1)
    base = int(time.time() * 1000) - 100_000
    client.produce(topic_name, [Rec(None, b"%d" % i, (), base + i * 10) for i in range(100)])
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x"})
    try:
        found = consumer.offsets_for_times([TopicPartition(topic_name, 0, base + 505)], timeout=10)
        assert found[0].offset == 51  # first record with timestamp >= base+505
        found = consumer.offsets_for_times([TopicPartition(topic_name, 0, base)], timeout=10)
        assert found[0].offset == 0
        found = consumer.offsets_for_times([TopicPartition(topic_name, 0, base + 10**7)], timeout=10)
        assert found[0].offset == -1  # none that late
        low, high = consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10)
        assert (low, high) == (0, 100)
    finally:
        consumer.close()


KCAT = shutil.which("kcat")


@pytest.mark.kcat
@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (make test installs it with apt-get as root)")
def test_kcat_metadata_produce_consume(broker, topic_name):
    ConfluentClient(broker.bootstrap).create_topic(topic_name, 2)
    lines = "\n".join(f"k{i}:v{i}" for i in range(20)) + "\n"
    subprocess.run([KCAT, "-b", broker.bootstrap, "-P", "-t", topic_name, "-K:"], input=lines.encode(),
                   check=True, timeout=30)
    meta = subprocess.run([KCAT, "-b", broker.bootstrap, "-L", "-J"], capture_output=True, check=True, timeout=30)
    topics = {t["topic"]: t for t in json.loads(meta.stdout)["topics"]}
    assert len(topics[topic_name]["partitions"]) == 2
    out = subprocess.run([KCAT, "-b", broker.bootstrap, "-C", "-t", topic_name, "-e", "-f", "%k=%s\n"],
                         capture_output=True, check=True, timeout=30)
    assert sorted(out.stdout.decode().split()) == sorted(f"k{i}=v{i}" for i in range(20))


def test_http_health_ready_and_metrics(broker, topic_name):
    client = ConfluentClient(broker.bootstrap)
    client.create_topic(topic_name, 1)
    client.produce(topic_name, [Rec(None, b"x" * 100) for _ in range(10)])
    client.consume(topic_name, 10)
    assert broker.http_get("/healthz")[0] == 200
    status, body = broker.http_get("/readyz")
    assert status == 200 and json.loads(body)["status"] == "ready"
    assert broker.metric("dm_messages_in_total", topic=topic_name) == 10
    assert broker.metric("dm_bytes_in_total", topic=topic_name) > 1000
    assert broker.metric("dm_messages_out_total", topic=topic_name) >= 10
    assert broker.metric("dm_log_end_offset", topic=topic_name, partition="0") == 10
    assert broker.metric("dm_active_connections") >= 0
    _, text = broker.http_get("/metrics")
    assert 'dm_request_duration_seconds_bucket{api="Produce"' in text
    # the event-loop probe runs every 50 ms from start-up on
    assert broker.metric("dm_event_loop_lag_seconds_count") > 0
    # late probes by cause, each cause exported from the start
    for cause in ("busy", "run_queue", "other_thread", "blocked"):
        assert broker.metric("dm_event_loop_stalls_total", cause=cause) >= 0


def run_dm(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "dm_broker.cli", *args], input=stdin, capture_output=True,
                          timeout=60)


def test_cli_topics_produce_consume(broker, topic_name):
    b = ["--bootstrap", broker.bootstrap]
    created = run_dm("topics", "create", topic_name, "--partitions", "3", "--config", "retention.ms=3600000", *b)
    assert created.returncode == 0, created.stderr
    assert topic_name in run_dm("topics", "list", *b).stdout.decode().split()
    described = run_dm("topics", "describe", topic_name, *b)
    assert described.returncode == 0, described.stderr
    assert "retention.ms=3600000" in described.stdout.decode()
    produced = run_dm("produce", topic_name, "--key-separator", ":", *b,
                      stdin=b"".join(b"user%d:event-%d\n" % (i % 5, i) for i in range(30)))
    assert produced.returncode == 0, produced.stderr
    consumed = run_dm("consume", topic_name, "--from-beginning", "--exit-at-end", "--print-key", "--timeout", "30", *b)
    assert consumed.returncode == 0, consumed.stderr
    lines = consumed.stdout.decode().splitlines()
    assert sorted(lines) == sorted(f"user{i % 5}\tevent-{i}" for i in range(30))
    # keyed lines were placed by murmur3(key) % 3, dm's default partitioner
    expected: dict[int, list[str]] = {0: [], 1: [], 2: []}
    for i in range(30):
        expected[murmur3_partition(b"user%d" % (i % 5), 3)].append(f"event-{i}")
    for partition, values in expected.items():
        got = run_dm("consume", topic_name, "--partition", str(partition), "--from-beginning", "--exit-at-end",
                     "--timeout", "20", *b)
        assert got.stdout.decode().splitlines() == values
    busiest = max(expected, key=lambda p: len(expected[p]))
    one = run_dm("consume", topic_name, "--partition", str(busiest), "--offset", "1", "--max-messages", "1",
                 "--timeout", "20", *b)
    assert one.stdout.decode().splitlines() == expected[busiest][1:2]
    bad = run_dm("topics", "create", topic_name, *b)
    assert bad.returncode != 0 and "already exists" in bad.stderr.decode().lower()
    assert run_dm("topics", "delete", topic_name, *b).returncode == 0
    assert topic_name not in run_dm("topics", "list", *b).stdout.decode().split()
