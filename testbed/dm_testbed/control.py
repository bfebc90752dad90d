"""The running testbed's control socket: status and the chaos primitives the e2e suites use."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web
from pydantic import BaseModel

from . import network

if TYPE_CHECKING:
    from .kubelet.agent import NodeAgent


class KillRequest(BaseModel):
    namespace: str
    pod: str
    container: str | None = None  # default: the pod's first container
    signal: int = signal.SIGKILL


class NetworkRequest(BaseModel):
    namespace: str
    pod: str
    connected: bool


class NodeRequest(BaseModel):
    node: str
    up: bool


def make_control_app(agent: NodeAgent, request_shutdown: Callable[[], None]) -> web.Application:
    def worker_or_404(namespace: str, pod: str):
        worker = agent.find(namespace, pod)
        if worker is None:
            raise web.HTTPNotFound(text=f"pod {namespace}/{pod} is not running on a testbed node")
        return worker

    async def status(_: web.Request) -> web.Response:
        pods = [{"namespace": w.namespace, "name": w.name, "uid": w.uid, "node": w.node.name, "ip": w.ip,
                 "stopping": w.stopping,
                 "containers": {r.name: {"pid": r.pid, "state": r.record.state, "restarts": r.record.restart_count}
                                for r in w.init + w.containers}}
                for w in agent.workers.values()]
        nodes = {n.name: {"up": n.up, "zone": n.zone} for n in agent.nodes.values()}
        return web.json_response({"nodes": nodes, "pods": pods})

    async def kill(request: web.Request) -> web.Response:
        req = KillRequest.model_validate(await request.json())
        worker = worker_or_404(req.namespace, req.pod)
        runner = worker.runner(req.container) if req.container else worker.containers[0]
        if runner is None:
            raise web.HTTPNotFound(text=f"no container {req.container} in {req.namespace}/{req.pod}")
        pid = runner.pid
        if not runner.kill_now(req.signal):
            raise web.HTTPConflict(text=f"container {runner.name} of {req.namespace}/{req.pod} is not running")
        return web.json_response({"killed": pid, "container": runner.name})

    async def cut(request: web.Request) -> web.Response:
        req = NetworkRequest.model_validate(await request.json())
        worker = worker_or_404(req.namespace, req.pod)
        await network.set_pod_link(agent.settings, worker.uid, req.connected)
        return web.json_response({"pod": req.pod, "connected": req.connected})

    async def node(request: web.Request) -> web.Response:
        req = NodeRequest.model_validate(await request.json())
        if req.node not in agent.nodes:
            raise web.HTTPNotFound(text=f"no node {req.node}")
        await agent.set_node_up(req.node, req.up)
        return web.json_response({"node": req.node, "up": req.up})

    async def shutdown(_: web.Request) -> web.Response:
        asyncio.get_running_loop().call_soon(request_shutdown)
        return web.json_response({"stopping": True})

    app = web.Application()
    app.router.add_get("/status", status)
    app.router.add_post("/chaos/kill", kill)
    app.router.add_post("/chaos/network", cut)
    app.router.add_post("/chaos/node", node)
    app.router.add_post("/shutdown", shutdown)
    return app
