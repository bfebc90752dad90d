"""The controller's HTTP/JSON API (aiohttp), protected by a shared token.

`dm controller` serves one controller under `/v1/`. The operator serves one per DMCluster under
`/clusters/<namespace>/<name>/v1/`, each with its own token: `add_controller_routes` takes how to
find the controller and its token from a request.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Awaitable, Callable

from aiohttp import WSMsgType, web
from pydantic import ValidationError

from .controller import Controller, ControllerError
from .models import (
    AclDeleteRequest,
    AclDeleteResults,
    AclResults,
    AclsRequest,
    AlterConfigsRequest,
    AlterIsrBatch,
    AlterIsrBatchResponse,
    AlterIsrRequest,
    BrokerConfigsRequest,
    CreatePartitionsRequest,
    CreateTopicRequest,
    ElectLeadersRequest,
    GroupConfigsRequest,
    HeartbeatRequest,
    PartitionResults,
    QuotaRequest,
    QuotaResults,
    ReassignmentsRequest,
    RegisterRequest,
    ScramRequest,
    ScramResults,
)

log = logging.getLogger(__name__)

# A broker's registration lists every log it holds (about 170 bytes each): aiohttp's default limit of
# 1 MiB refused the registration of a broker holding 10,000 partitions (HTTP 413, retried for ever).
# This allows some 750,000 per broker; the limit is checked only after the token.
MAX_REQUEST_BYTES = 128 << 20


def controller_application() -> web.Application:
    """An aiohttp application to mount controller routes on (`dm controller`, the operator)."""
    return web.Application(client_max_size=MAX_REQUEST_BYTES)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Resolver = Callable[[web.Request], Controller | None]
TokenOf = Callable[[web.Request], str]


def add_controller_routes(app: web.Application, prefix: str, resolve: Resolver, token_of: TokenOf) -> None:
    def controller_of(request: web.Request) -> Controller:
        controller = resolve(request)
        if controller is None:
            # The operator has not (yet) started this cluster's controller: brokers retry.
            raise web.HTTPServiceUnavailable(text=json.dumps({"error": "controller_unavailable",
                                                              "message": "no controller runs for this cluster here "
                                                                         "(yet)"}),
                                             content_type="application/json")
        expected = token_of(request)
        given = request.headers.get("Authorization", "").removeprefix("Bearer ")
        # compared as bytes: compare_digest refuses a str that is not ASCII (a 500 before, issue 65)
        if expected and not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode()):
            raise web.HTTPUnauthorized(text=json.dumps({"error": "unauthorized", "message": "bad or missing token"}),
                                       content_type="application/json")
        return controller

    def route(handler: Callable[[Controller, web.Request], Awaitable[web.StreamResponse]]) -> Handler:
        async def wrapped(request: web.Request) -> web.StreamResponse:
            controller = controller_of(request)
            try:
                return await handler(controller, request)
            except ControllerError as exc:
                return web.json_response({"error": exc.error, "message": exc.message}, status=409)
            except (ValidationError, json.JSONDecodeError, ValueError) as exc:
                return web.json_response({"error": "invalid_request", "message": str(exc)}, status=400)
            except web.HTTPRequestEntityTooLarge:  # the controller's word, so the broker's log says why
                return web.json_response({"error": "request_too_large", "message": (
                    f"a request body of {request.content_length} bytes is over the controller's size limit")},
                    status=413)

        return wrapped

    def reply(model) -> web.Response:
        return web.json_response(text=model.model_dump_json())

    async def register(c: Controller, request: web.Request) -> web.Response:
        return reply(await c.register(RegisterRequest.model_validate(await request.json())))

    async def heartbeat(c: Controller, request: web.Request) -> web.Response:
        return reply(await c.heartbeat(HeartbeatRequest.model_validate(await request.json())))

    async def session(c: Controller, request: web.Request) -> web.StreamResponse:
        """A WebSocket the broker keeps open while its process lives; its closing is how the
        controller learns at once that the process died."""
        node_id = int(request.match_info["node_id"])
        epoch = int(request.query.get("epoch", "-1"))
        token = c.open_session(node_id, epoch)
        if token is None:
            return web.json_response({"error": "stale_broker_epoch", "message": "register first"}, status=409)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        stopped = asyncio.ensure_future(c.stopped.wait())
        try:
            while True:
                received = asyncio.ensure_future(ws.receive())
                await asyncio.wait({received, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if not received.done():
                    # The controller stops (its operator no longer leads): the broker holds its next session
                    # with whichever controller answers then.
                    received.cancel()
                    await ws.close()
                    break
                if received.result().type in (WSMsgType.ERROR, WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED):
                    break
        finally:
            stopped.cancel()
            await c.close_session(node_id, token, epoch)
        return ws

    async def shutdown(c: Controller, request: web.Request) -> web.Response:
        node_id = int(request.match_info["node_id"])
        still = await c.controlled_shutdown(node_id, int(request.query.get("epoch", "-1")))
        return web.json_response({"still_leading": still})

    async def metadata(c: Controller, request: web.Request) -> web.Response:
        version = int(request.query.get("version", "-1"))
        wait = min(int(request.query.get("wait_ms", "0")), 60_000) / 1000
        md = await c.wait_for_change(version, request.query.get("incarnation", ""), wait,
                                     delta=request.query.get("delta") == "1")
        return reply(md)

    async def alter_isr(c: Controller, request: web.Request) -> web.Response:
        return reply(await c.alter_isr(AlterIsrRequest.model_validate(await request.json())))

    async def alter_isr_batch(c: Controller, request: web.Request) -> web.Response:
        batch = AlterIsrBatch.model_validate(await request.json())
        return reply(AlterIsrBatchResponse(responses=await c.alter_isr_batch(batch.changes)))

    async def create_topic(c: Controller, request: web.Request) -> web.Response:
        return reply(await c.create_topic(CreateTopicRequest.model_validate(await request.json())))

    async def delete_topic(c: Controller, request: web.Request) -> web.Response:
        return reply(await c.delete_topic(request.match_info["name"]))

    async def create_partitions(c: Controller, request: web.Request) -> web.Response:
        req = CreatePartitionsRequest.model_validate(await request.json())
        return reply(await c.create_partitions(request.match_info["name"], req))

    async def alter_configs(c: Controller, request: web.Request) -> web.Response:
        req = AlterConfigsRequest.model_validate(await request.json())
        return reply(await c.alter_configs(request.match_info["name"], req.configs, req.validate_only))

    async def producer_ids(c: Controller, _: web.Request) -> web.Response:
        return reply(await c.allocate_producer_ids())

    async def reassignments(c: Controller, request: web.Request) -> web.Response:
        req = ReassignmentsRequest.model_validate(await request.json())
        return reply(PartitionResults(results=await c.alter_reassignments(req.reassignments)))

    async def elections(c: Controller, request: web.Request) -> web.Response:
        req = ElectLeadersRequest.model_validate(await request.json())
        return reply(PartitionResults(results=await c.elect_leaders(req.unclean, req.partitions)))

    async def broker_configs(c: Controller, request: web.Request) -> web.Response:
        return reply(await c.alter_broker_configs(BrokerConfigsRequest.model_validate(await request.json())))

    async def group_configs(c: Controller, request: web.Request) -> web.Response:
        return reply(await c.alter_group_configs(GroupConfigsRequest.model_validate(await request.json())))

    async def cluster(c: Controller, _: web.Request) -> web.Response:
        return reply(c.cluster_info())

    async def create_acls(c: Controller, request: web.Request) -> web.Response:
        req = AclsRequest.model_validate(await request.json())
        return reply(AclResults(errors=await c.create_acls(req.acls)))

    async def delete_acls(c: Controller, request: web.Request) -> web.Response:
        req = AclDeleteRequest.model_validate(await request.json())
        return reply(AclDeleteResults(deleted=await c.delete_acls(req.filters)))

    async def alter_scram(c: Controller, request: web.Request) -> web.Response:
        req = ScramRequest.model_validate(await request.json())
        return reply(ScramResults(results=await c.alter_scram(req.alterations)))

    async def alter_quotas(c: Controller, request: web.Request) -> web.Response:
        req = QuotaRequest.model_validate(await request.json())
        return reply(QuotaResults(results=await c.alter_quotas(req.alterations, req.validate_only)))

    v1 = f"{prefix}/v1"
    app.router.add_post(f"{v1}/brokers/register", route(register))
    app.router.add_post(f"{v1}/brokers/heartbeat", route(heartbeat))
    app.router.add_get(f"{v1}/brokers/{{node_id}}/session", route(session))
    app.router.add_post(f"{v1}/brokers/{{node_id}}/shutdown", route(shutdown))
    app.router.add_get(f"{v1}/metadata", route(metadata))
    app.router.add_post(f"{v1}/isr", route(alter_isr))  # one change: what brokers before the batches send
    app.router.add_post(f"{v1}/isr/batch", route(alter_isr_batch))
    app.router.add_post(f"{v1}/topics", route(create_topic))
    app.router.add_delete(f"{v1}/topics/{{name}}", route(delete_topic))
    app.router.add_post(f"{v1}/topics/{{name}}/partitions", route(create_partitions))
    app.router.add_put(f"{v1}/topics/{{name}}/configs", route(alter_configs))
    app.router.add_post(f"{v1}/producer-ids", route(producer_ids))
    app.router.add_post(f"{v1}/reassignments", route(reassignments))
    app.router.add_post(f"{v1}/elections", route(elections))
    app.router.add_put(f"{v1}/broker-configs", route(broker_configs))
    app.router.add_put(f"{v1}/group-configs", route(group_configs))
    app.router.add_get(f"{v1}/cluster", route(cluster))
    app.router.add_post(f"{v1}/acls", route(create_acls))
    app.router.add_post(f"{v1}/acls/delete", route(delete_acls))
    app.router.add_post(f"{v1}/scram", route(alter_scram))
    app.router.add_post(f"{v1}/quotas", route(alter_quotas))


def make_app(controller: Controller, token: str = "") -> web.Application:
    """`dm controller`: one controller under /v1/, and /healthz."""

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "version": controller.version,
                                  "brokers": {b.node_id: not b.fenced for b in controller.brokers.values()}})

    app = controller_application()
    add_controller_routes(app, "", lambda _: controller, lambda _: token)
    app.router.add_get("/healthz", healthz)
    return app
