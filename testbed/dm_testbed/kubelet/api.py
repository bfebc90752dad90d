"""The part of the kubelet's HTTPS API the API server calls for `kubectl logs`; every other
kubelet endpoint (exec, attach, port-forward) answers that the testbed does not provide it."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from .agent import NodeAgent


def _tail(path: Path, lines: int | None, limit: int | None) -> tuple[bytes, int]:
    """What to send first, and how far into the file that read went (where following goes on)."""
    data = path.read_bytes()
    read = len(data)
    if lines is not None:
        data = b"".join(data.splitlines(keepends=True)[-lines:]) if lines > 0 else b""
    if limit is not None:
        data = data[:limit]
    return data, read


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read()
    except FileNotFoundError:
        return b""


def make_kubelet_app(agent: NodeAgent, node: str) -> web.Application:
    async def logs(request: web.Request) -> web.StreamResponse:
        ns, pod, container = (request.match_info[k] for k in ("namespace", "pod", "container"))
        worker = agent.find(ns, pod)
        if worker is None or worker.node.name != node:
            raise web.HTTPNotFound(text=f"pod {ns}/{pod} is not running on {node}")
        runner = worker.runner(container)
        if runner is None:
            raise web.HTTPNotFound(text=f"container {container} is not in pod {ns}/{pod}")
        previous = request.query.get("previous") in ("true", "1")
        path = runner.previous_log if previous else runner.log_path
        if path is None or not path.exists():
            what = "previous terminated container" if previous else "container"
            raise web.HTTPBadRequest(text=f'{what} "{container}" in pod "{pod}" not found')
        tail = request.query.get("tailLines")
        limit = request.query.get("limitBytes")
        data, offset = _tail(path, int(tail) if tail else None, int(limit) if limit else None)
        if request.query.get("follow") not in ("true", "1"):
            return web.Response(body=data, content_type="text/plain")
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        await resp.write(data)
        # Following goes on from where the first read ended (not from the size after sending it:
        # what the container wrote meanwhile would be skipped), and ends with whatever it wrote
        # last, once it has exited or restarted.
        while True:
            done = runner.log_path != path or worker.finished.is_set()
            more = _read_from(path, offset)
            if more:
                await resp.write(more)
                offset += len(more)
            if done:
                return resp
            await asyncio.sleep(0.5)

    async def unsupported(request: web.Request) -> web.Response:
        return web.Response(status=501, text=f"{request.path.split('/')[1]} is not provided by the dm testbed's "
                                             "node emulation (pods are local processes; use their pod IP)")

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", logs)
    app.router.add_get("/healthz", healthz)
    for prefix in ("exec", "attach", "portForward", "run"):
        app.router.add_route("*", f"/{prefix}/{{tail:.*}}", unsupported)
    return app


async def serve_kubelet_api(agent: NodeAgent, node: str, host: str, port: int, cert: Path,
                            key: Path) -> web.AppRunner:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert), str(key))
    runner = web.AppRunner(make_kubelet_app(agent, node), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=ctx).start()
    return runner
