"""The controller's HTTP API takes what brokers send at scale: a broker holding 10,000 partitions
registers (its registration is about 1.7 MB; aiohttp's default limit of 1 MiB refused it and the broker
retried for ever), and a body over the limit is refused with the controller's own error."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from dm_broker.controller.client import ControllerError, HttpControllerClient
from dm_broker.controller.controller import Controller
from dm_broker.controller.http import add_controller_routes, make_app
from dm_broker.controller.models import HeldPartition, RegisterRequest
from dm_broker.controller.store import FileControllerStore
from harness import free_port


def registration(node_id: int, partitions: int) -> RegisterRequest:
    topic_id = str(uuid.uuid4())
    holdings = [HeldPartition(topic=f"scale-{i // 100:04d}", partition=i % 100, topic_id=topic_id, last_leader_epoch=3,
                              log_end_offset=123456, log_start_offset=0) for i in range(partitions)]
    return RegisterRequest(node_id=node_id, host="127.0.0.1", port=9092, incarnation=f"i{node_id}",
                           holdings=holdings)


@contextlib.asynccontextmanager
async def served(app: web.Application) -> AsyncIterator[HttpControllerClient]:
    """`app` on a local port, and a client of it (token "t")."""
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    client = HttpControllerClient(f"http://127.0.0.1:{port}", "t", timeout_s=60)
    try:
        yield client
    finally:
        await client.close()
        await runner.cleanup()


def app_with_limit(controller: Controller, limit: int) -> web.Application:
    app = web.Application(client_max_size=limit)
    add_controller_routes(app, "", lambda _: controller, lambda _: "t")
    return app


async def test_a_broker_holding_ten_thousand_partitions_registers(tmp_path):
    controller = await Controller.open(FileControllerStore(tmp_path / "store"), expected_brokers=1)
    async with served(make_app(controller, token="t")) as client:
        req = registration(0, 10_000)
        assert len(req.model_dump_json()) > 1 << 20
        resp = await client.register(req)
        assert resp.broker_epoch == 1 and controller.brokers[0].epoch == 1
    async with served(app_with_limit(controller, 1 << 20)) as small:
        with pytest.raises(ControllerError, match="over the controller's size limit"):
            await small.register(registration(1, 10_000))


async def test_isr_changes_in_one_batch_over_http(tmp_path):
    # A leader sends its ISR changes together (POST /v1/isr/batch): answered in order, each on its own.
    from dm_broker.controller.models import AlterIsrRequest, CreateTopicRequest

    controller = await Controller.open(FileControllerStore(tmp_path / "store"), expected_brokers=3)
    async with served(make_app(controller, token="t")) as client:
        epochs = {i: (await client.register(registration(i, 0))).broker_epoch for i in range(3)}
        await client.create_topic(CreateTopicRequest(name="t", partitions=300, replication_factor=3))
        changes = []
        for i, p in enumerate(controller.topics["t"].partitions):
            changes.append(AlterIsrRequest(node_id=p.leader, broker_epoch=epochs[p.leader], topic="t", partition=i,
                                           leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                                           new_isr=[p.leader, p.replicas[-1] if p.replicas[-1] != p.leader
                                                    else p.replicas[0]]))
        changes[7] = changes[7].model_copy(update={"leader_epoch": 99})
        answers = await client.alter_isr_batch(changes)
        assert [a.error for a in answers] == [None] * 7 + ["fenced_leader_epoch"] + [None] * 292
        assert all(len(controller.topics["t"].partitions[i].isr) == 2 for i in range(300) if i != 7)


async def test_a_token_that_is_not_ascii_is_refused_not_a_server_error(tmp_path):
    """hmac.compare_digest refuses a str that is not ASCII: a non-ASCII Authorization header was a 500 (issue 65)."""
    import aiohttp

    controller = await Controller.open(FileControllerStore(tmp_path / "store"), expected_brokers=1)
    async with served(make_app(controller, token="t")) as client, aiohttp.ClientSession() as session:
        not_utf8 = "Bearer \udcff".encode("utf-8", "surrogateescape").decode("latin-1")
        for header in ("Bearer tée", not_utf8, "Bearer wrong"):
            async with session.get(f"{client.url}/v1/metadata", headers={"Authorization": header}) as resp:
                assert resp.status == 401, (header, resp.status)
