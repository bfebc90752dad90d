"""Runs one broker process (or the controller): recovery, listeners, signals."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import signal

from aiohttp import web

from .broker import Broker, embedded_controller
from .config import BrokerConfig
from .controller.client import HttpControllerClient, LocalControllerClient
from .http.app import make_app
from .log.checkpoints import atomic_write
from .metrics import watch_event_loop
from .server import KafkaServer
from .tasks import stop_tasks

log = logging.getLogger(__name__)


def install_event_loop_policy() -> str:
    try:
        import uvloop
    except ImportError:
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"


def tune_gc() -> None:
    """Request handling allocates many short-lived objects; with the default thresholds the cyclic
    collector runs every few requests and its pauses show up in tail latency. Objects alive after
    start-up are moved out of its way, and young collections happen less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def _stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def serve(config: BrokerConfig, banner: bool = False) -> None:
    stop = _stop_event()
    loop = asyncio.get_running_loop()
    token = config["controller.token"] or os.environ.get("DM_CONTROLLER_TOKEN", "")
    embedded = None
    if config["controller.url"]:
        client = HttpControllerClient(config["controller.url"], token)
    else:
        embedded = embedded_controller(config)
        embedded.start()
        client = LocalControllerClient(embedded)
    broker = Broker(config, client)

    runner: web.AppRunner | None = None
    http_port = config["http.port"]
    if http_port >= 0:
        runner = web.AppRunner(make_app(broker), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, config["listener.host"], http_port)
        await site.start()
        http_port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    # Recovery blocks on disk reads; run it off the loop so /healthz answers meanwhile.
    await loop.run_in_executor(None, broker.recover_logs)
    server = KafkaServer(broker.dispatcher, config["socket.request.max.bytes"], config["connections.max.idle.ms"])
    broker.port = await server.start(config["listener.host"], config["listener.port"])
    await broker.start()
    listeners = {"kafka": f"{config.advertised_host}:{config['advertised.port'] or broker.port}",
                 "http_port": http_port, "node_id": broker.node_id}
    atomic_write(config.data_dir / "__dm_meta" / "listeners.json", json.dumps(listeners).encode())
    log.info("dm broker %d ready: kafka %s, http %s", broker.node_id, listeners["kafka"], http_port)
    if banner:
        print_banner(listeners["kafka"], http_port)
    print(f"DM_READY {json.dumps(listeners)}", flush=True)
    tune_gc()
    loop_watch = asyncio.create_task(watch_event_loop(broker.metrics))

    await stop.wait()
    log.info("shutting down broker %d", broker.node_id)
    await stop_tasks(loop_watch)
    if embedded is None:
        await broker.controlled_shutdown()
    await server.close()
    await broker.close()
    if runner is not None:
        with contextlib.suppress(Exception):
            await runner.cleanup()
    log.info("broker %d stopped cleanly", broker.node_id)


async def serve_controller(config: BrokerConfig, port: int, token: str) -> None:
    """`dm controller`: the cluster controller as its own process (file-backed store)."""
    from .controller.controller import Controller
    from .controller.http import make_app as controller_app
    from .controller.store import FileControllerStore

    stop = _stop_event()
    store = FileControllerStore(config.data_dir / "controller")
    controller = Controller(store, session_timeout_ms=config["broker.session.timeout.ms"],
                            unclean_election_default=config["unclean.leader.election.enable"])
    controller.start()
    runner = web.AppRunner(controller_app(controller, token), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, config["listener.host"], port)
    await site.start()
    actual = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    log.info("dm controller ready on http://%s:%d (%d topics)", config["listener.host"], actual,
             len(controller.topics))
    print(f"DM_READY {json.dumps({'controller': f'http://{config.advertised_host}:{actual}'})}", flush=True)
    await stop.wait()
    await controller.close()
    await runner.cleanup()


def print_banner(bootstrap: str, http_port: int) -> None:
    print(
        f"""
dm is running. Bootstrap server: {bootstrap}   (metrics: http://127.0.0.1:{http_port}/metrics)

  In another terminal:
    .venv/bin/dm topics create demo --partitions 3
    echo hello | .venv/bin/dm produce demo
    .venv/bin/dm consume demo --from-beginning --max-messages 1
    kcat -b {bootstrap} -L

Press Ctrl-C to stop.
""",
        flush=True,
    )


def run(config: BrokerConfig, banner: bool = False) -> None:
    install_event_loop_policy()
    asyncio.run(serve(config, banner))


def run_controller(config: BrokerConfig, port: int, token: str) -> None:
    install_event_loop_policy()
    asyncio.run(serve_controller(config, port, token))
