"""Every client produces and consumes through a real broker process: acks, keys, codecs,
headers, large records, timestamps."""

from __future__ import annotations

import time

import pytest
from clients import CLIENTS, Got, Rec

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(params=CLIENTS, ids=lambda c: c.name)
def client(request, broker):
    return request.param(broker.bootstrap)


def make_records(n: int, keyed: bool, size: int = 100, base_ts: int | None = None) -> list[Rec]:
    base_ts = base_ts or int(time.time() * 1000) - 60_000
    return [
        Rec(
            key=(b"key-%d" % (i % 7)) if keyed else None,
            value=(b"%08d:" % i) + bytes([65 + i % 26]) * size,
            headers=(("seq", b"%d" % i), ("kind", b"test")),
            timestamp=base_ts + i,
        )
        for i in range(n)
    ]


def check_round_trip(sent: list[Rec], got: list[Got], acked_offsets: list[tuple[int, int]] | None) -> None:
    assert len(got) == len(sent), f"consumed {len(got)} of {len(sent)}"
    by_value = {g.value: g for g in got}
    assert len(by_value) == len(sent), "duplicate records consumed"
    for i, rec in enumerate(sent):
        g = by_value[rec.value]
        assert g.key == rec.key
        assert g.headers == rec.headers
        assert g.timestamp == rec.timestamp
        if acked_offsets and acked_offsets[i][1] >= 0:
            assert (g.partition, g.offset) == acked_offsets[i]
    # order within each partition follows send order
    per_partition: dict[int, list[Got]] = {}
    for g in sorted(got, key=lambda g: (g.partition, g.offset)):
        per_partition.setdefault(g.partition, []).append(g)
    order = {rec.value: i for i, rec in enumerate(sent)}
    for records in per_partition.values():
        seq = [order[g.value] for g in records]
        assert seq == sorted(seq)
        offsets = [g.offset for g in records]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_produce_consume_acks(client, topic_name, acks):
    client.create_topic(topic_name, 3)
    sent = make_records(300, keyed=False) + make_records(300, keyed=True, base_ts=int(time.time() * 1000))
    sent = [Rec(r.key, r.value + b"-%d" % i, r.headers, r.timestamp) for i, r in enumerate(sent)]
    acked = client.produce(topic_name, sent, acks=acks)
    got = client.consume(topic_name, len(sent))
    check_round_trip(sent, got, acked.offsets if acks != "0" else None)
    # keyed records: same key, same partition
    partitions_by_key: dict[bytes, set[int]] = {}
    by_value = {g.value: g for g in got}
    for rec in sent:
        if rec.key is not None:
            partitions_by_key.setdefault(rec.key, set()).add(by_value[rec.value].partition)
    assert all(len(p) == 1 for p in partitions_by_key.values())


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches(client, topic_name, codec):
    client.create_topic(topic_name, 2)
    sent = make_records(500, keyed=True, size=300)
    acked = client.produce(topic_name, sent, acks="all", compression=codec)
    check_round_trip(sent, client.consume(topic_name, len(sent)), acked.offsets)


def test_one_mebibyte_records(client, topic_name):
    client.create_topic(topic_name, 1, {"max.message.bytes": str(3 << 20)})
    sent = [Rec(b"big-%d" % i, bytes([i]) * (1 << 20), (("n", b"%d" % i),), int(time.time() * 1000) + i)
            for i in range(4)]
    acked = client.produce(topic_name, sent, acks="all", max_bytes=2 << 20)
    check_round_trip(sent, client.consume(topic_name, len(sent)), acked.offsets)


def test_auto_created_topic(client, topic_name):
    sent = make_records(20, keyed=True)
    client.produce(topic_name, sent, acks="1")
    check_round_trip(sent, client.consume(topic_name, len(sent)), None)


def test_cross_client_read(broker, topic_name):
    """Records written by one client read identically by the others."""
    writer = CLIENTS[0](broker.bootstrap)
    writer.create_topic(topic_name, 2)
    sent = make_records(100, keyed=True)
    acked = writer.produce(topic_name, sent, compression="lz4")
    for reader in CLIENTS[1:]:
        check_round_trip(sent, reader(broker.bootstrap).consume(topic_name, len(sent)), acked.offsets)
