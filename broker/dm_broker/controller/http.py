"""The controller's HTTP/JSON API (aiohttp), protected by a shared token."""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable

from aiohttp import web
from pydantic import ValidationError

from .controller import Controller, ControllerError
from .models import (
    AlterConfigsRequest,
    AlterIsrRequest,
    CreatePartitionsRequest,
    CreateTopicRequest,
    HeartbeatRequest,
    RegisterRequest,
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def make_app(controller: Controller, token: str = "") -> web.Application:
    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if token and request.path.startswith("/v1/"):
            given = request.headers.get("Authorization", "").removeprefix("Bearer ")
            if not hmac.compare_digest(given, token):
                return web.json_response({"error": "unauthorized", "message": "bad or missing token"}, status=401)
        try:
            return await handler(request)
        except ControllerError as exc:
            return web.json_response({"error": exc.error, "message": exc.message}, status=409)
        except (ValidationError, json.JSONDecodeError, ValueError) as exc:
            return web.json_response({"error": "invalid_request", "message": str(exc)}, status=400)

    def reply(model) -> web.Response:
        return web.json_response(text=model.model_dump_json())

    async def register(request: web.Request) -> web.Response:
        return reply(controller.register(RegisterRequest.model_validate(await request.json())))

    async def heartbeat(request: web.Request) -> web.Response:
        return reply(controller.heartbeat(HeartbeatRequest.model_validate(await request.json())))

    async def shutdown(request: web.Request) -> web.Response:
        node_id = int(request.match_info["node_id"])
        still = controller.controlled_shutdown(node_id, int(request.query.get("epoch", "-1")))
        return web.json_response({"still_leading": still})

    async def metadata(request: web.Request) -> web.Response:
        version = int(request.query.get("version", "-1"))
        wait = min(int(request.query.get("wait_ms", "0")), 60_000) / 1000
        md = await controller.wait_for_change(version, request.query.get("incarnation", ""), wait)
        return reply(md)

    async def alter_isr(request: web.Request) -> web.Response:
        return reply(controller.alter_isr(AlterIsrRequest.model_validate(await request.json())))

    async def create_topic(request: web.Request) -> web.Response:
        return reply(controller.create_topic(CreateTopicRequest.model_validate(await request.json())))

    async def delete_topic(request: web.Request) -> web.Response:
        return reply(controller.delete_topic(request.match_info["name"]))

    async def create_partitions(request: web.Request) -> web.Response:
        req = CreatePartitionsRequest.model_validate(await request.json())
        return reply(controller.create_partitions(request.match_info["name"], req))

    async def alter_configs(request: web.Request) -> web.Response:
        req = AlterConfigsRequest.model_validate(await request.json())
        return reply(controller.alter_configs(request.match_info["name"], req.configs, req.validate_only))

    async def producer_ids(_: web.Request) -> web.Response:
        return reply(controller.allocate_producer_ids())

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "version": controller.version,
                                  "brokers": {b.node_id: not b.fenced for b in controller.brokers.values()}})

    app = web.Application(middlewares=[guard])
    app.router.add_post("/v1/brokers/register", register)
    app.router.add_post("/v1/brokers/heartbeat", heartbeat)
    app.router.add_post("/v1/brokers/{node_id}/shutdown", shutdown)
    app.router.add_get("/v1/metadata", metadata)
    app.router.add_post("/v1/isr", alter_isr)
    app.router.add_post("/v1/topics", create_topic)
    app.router.add_delete("/v1/topics/{name}", delete_topic)
    app.router.add_post("/v1/topics/{name}/partitions", create_partitions)
    app.router.add_put("/v1/topics/{name}/configs", alter_configs)
    app.router.add_post("/v1/producer-ids", producer_ids)
    app.router.add_get("/healthz", healthz)
    return app
