"""The broker's HTTP controller client against a real HTTP server that answers with what is not the
controller's answer: an empty body, JSON null, a list, HTML, a JSON object of the wrong shape. Each is
ControllerUnavailable (retried by the broker's loops), never another exception: on kind an operator pod
that was starting answered a heartbeat with an empty error body, the client raised AttributeError, and
the broker's heartbeat loop died with it, leaving the broker fenced for good."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from aiohttp import web
from dm_broker.controller.client import ControllerError, ControllerUnavailable, HttpControllerClient
from dm_broker.controller.models import AlterIsrRequest, HeartbeatRequest

ANSWERS = {  # a fresh response for each request (aiohttp sends a response object once)
    "empty-404": lambda: web.Response(status=404),
    "empty-409": lambda: web.Response(status=409),
    "null-400": lambda: web.Response(status=400, text="null", content_type="application/json"),
    "list-200": lambda: web.json_response([1, 2]),
    "html-502": lambda: web.Response(status=502, text="<html>bad gateway</html>", content_type="text/html"),
    "wrong-shape-200": lambda: web.json_response({"ok": "maybe", "state": 5, "still_leading": 3}),
    "refusal-409": lambda: web.json_response({"error": "stale_broker_epoch", "message": "register first"},
                                             status=409),
}


async def serve(answer: Callable[[], web.Response]) -> tuple[web.AppRunner, str]:
    async def handler(request: web.Request) -> web.Response:
        return answer()

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


@pytest.mark.parametrize("kind", sorted(ANSWERS))
async def test_what_is_not_the_controllers_answer_is_unavailable(kind: str) -> None:
    runner, url = await serve(ANSWERS[kind])
    client = HttpControllerClient(url, timeout_s=5)
    try:
        calls = [client.heartbeat(HeartbeatRequest(node_id=0, broker_epoch=1)),
                 client.alter_isr_batch([AlterIsrRequest(node_id=0, broker_epoch=1, topic="t", partition=0,
                                                         leader_epoch=0, partition_epoch=0, new_isr=[0])]),
                 client.controlled_shutdown(0, 1)]
        for call in calls:
            if kind == "refusal-409":
                with pytest.raises(ControllerError) as refused:
                    await call
                assert refused.value.error == "stale_broker_epoch"
            else:
                with pytest.raises(ControllerUnavailable):
                    await call
    finally:
        await client.close()
        await runner.cleanup()
