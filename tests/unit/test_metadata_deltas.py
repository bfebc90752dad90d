"""Metadata deltas (ADR 0033): a broker that knows version V of this controller is sent only the topics
changed since V and the names of those removed; merged into its snapshot at V the result is the full
snapshot, and the topics that did not change keep their objects (which apply_metadata skips). A real
controller on a real file store, and its real HTTP API."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from aiohttp import web
from dm_broker.controller.client import HttpControllerClient
from dm_broker.controller.controller import Controller
from dm_broker.controller.http import make_app
from dm_broker.controller.models import AlterIsrRequest, ClusterMetadata, CreateTopicRequest, RegisterRequest
from dm_broker.controller.store import FileControllerStore


async def controller(tmp: Path) -> tuple[Controller, dict[int, int]]:
    c = await Controller.open(FileControllerStore(tmp), session_timeout_ms=60000)
    epochs = {i: (await c.register(RegisterRequest(node_id=i, host="h", port=9000 + i, incarnation=f"i{i}")))
              .broker_epoch for i in range(3)}
    return c, epochs


async def shrink_isr(c: Controller, epochs: dict[int, int], topic: str, index: int) -> None:
    p = c.topics[topic].partitions[index]
    follower = next(r for r in p.isr if r != p.leader)
    answer = await c.alter_isr(AlterIsrRequest(node_id=p.leader, broker_epoch=epochs[p.leader], topic=topic,
                                               partition=index, leader_epoch=p.leader_epoch,
                                               partition_epoch=p.partition_epoch,
                                               new_isr=[r for r in p.isr if r != follower]))
    assert answer.error is None


def same(a: ClusterMetadata, b: ClusterMetadata) -> None:
    assert a.version == b.version and a.model_dump() == b.model_dump()


async def test_a_delta_names_only_what_changed_and_merges_into_the_full_snapshot(tmp_path: Path) -> None:
    c, epochs = await controller(tmp_path)
    for name in ("a", "b", "c"):
        await c.create_topic(CreateTopicRequest(name=name, partitions=4, replication_factor=3))
    known = c.metadata()
    await shrink_isr(c, epochs, "b", 2)
    await c.delete_topic("c")
    await c.create_topic(CreateTopicRequest(name="d", partitions=1, replication_factor=1))

    delta = c.metadata(since=known.version)
    assert delta.delta_from == known.version
    assert sorted(delta.topics) == ["b", "d"] and delta.removed_topics == ["c"]
    merged = delta.merged_into(known)
    same(merged, c.metadata())
    assert merged.topics["a"] is known.topics["a"]  # unchanged: the broker's own object, skipped when applied
    assert c.metadata(since=c.version).topics == {}  # nothing newer

    with pytest.raises(ValueError, match="cannot apply"):
        delta.merged_into(c.metadata())  # not the snapshot the delta starts from
    assert c.metadata(since=c.version + 5).delta_from == -1  # a version this controller never had: whole


async def test_any_earlier_snapshot_plus_its_delta_is_the_current_snapshot(tmp_path: Path) -> None:
    c, epochs = await controller(tmp_path)
    rng = random.Random(7)
    snapshots = [c.metadata()]
    names = [f"t{i}" for i in range(6)]
    for _ in range(40):
        name = rng.choice(names)
        if name not in c.topics:
            await c.create_topic(CreateTopicRequest(name=name, partitions=rng.randint(1, 3), replication_factor=3))
        elif rng.random() < 0.3:
            await c.delete_topic(name)
        else:
            doc = c.topics[name]
            index = rng.randrange(len(doc.partitions))
            if len(doc.partitions[index].isr) > 1:
                await shrink_isr(c, epochs, name, index)
        snapshots.append(c.metadata())
    now = c.metadata()
    for known in snapshots:
        same(c.metadata(since=known.version).merged_into(known), now)


async def test_the_http_api_serves_deltas_to_those_who_ask_and_whole_snapshots_to_others(tmp_path: Path) -> None:
    c, epochs = await controller(tmp_path)
    await c.create_topic(CreateTopicRequest(name="a", partitions=2, replication_factor=3))
    await c.create_topic(CreateTopicRequest(name="b", partitions=2, replication_factor=3))
    runner = web.AppRunner(make_app(c, token=""))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = HttpControllerClient(f"http://127.0.0.1:{port}", timeout_s=5)
    try:
        known = await client.metadata(-1, "", 0)
        assert known.delta_from == -1 and sorted(known.topics) == ["a", "b"]
        await shrink_isr(c, epochs, "a", 1)
        delta = await client.metadata(known.version, known.incarnation, 5, delta=True)
        assert delta.delta_from == known.version and list(delta.topics) == ["a"]
        same(delta.merged_into(known), c.metadata())
        whole = await client.metadata(known.version, known.incarnation, 5)  # a broker of the previous release
        assert whole.delta_from == -1 and sorted(whole.topics) == ["a", "b"]
        other = await client.metadata(known.version, "another-incarnation", 0, delta=True)
        assert other.delta_from == -1 and sorted(other.topics) == ["a", "b"]
    finally:
        await client.close()
        await runner.cleanup()
