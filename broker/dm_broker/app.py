"""Runs one broker process (or the controller): recovery, listeners, signals."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import os
import signal
import ssl
import time
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from aiohttp import web

from .broker import Broker, embedded_controller
from .config import BrokerConfig, ConfigError, without_effect
from .connection_quotas import ConnectionQuotas
from .controller.client import HttpControllerClient, LocalControllerClient
from .dirlock import DirectoryInUse, DirectoryLock, DirectoryUnusable
from .gc_tuning import freeze_as_it_grows, tune_gc
from .http.app import make_app
from .http.budgeted_site import BudgetedSite
from .http.rest.server import RestProxy
from .log import dir_failure
from .log.checkpoints import atomic_write
from .log.dir_failure import LogDirFailure
from .log.manager import RecoveryAborted
from .log.meta_properties import IdentityError
from .loop_watchdog import LoopWatchdog
from .malloc_tuning import tune_malloc
from .metrics import watch_event_loop
from .private_files import make_private
from .security.tls import TlsSettings, client_context, server_context
from .server import KafkaServer
from .tasks import stop_tasks

log = logging.getLogger(__name__)
T = TypeVar("T")


def install_event_loop_policy() -> str:
    try:
        import uvloop
    except ImportError:
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"


class Stopped(Exception):
    """A stop signal arrived before start-up finished."""


def _stop_event() -> asyncio.Event:
    """Set by the first SIGTERM/SIGINT; a second one exits at once (what a SIGKILL would do, which
    the logs' recovery handles) for whoever does not want to wait for a controlled shutdown."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        if stop.is_set():
            log.warning("second %s: exiting without a controlled shutdown", signal.Signals(signum).name)
            logging.shutdown()
            os._exit(128 + signum)
        log.info("%s: stopping (send it again to exit at once)", signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    return stop


async def until_stopped(work: Awaitable[T], stop: asyncio.Event) -> T:
    """Awaits `work` unless a stop signal comes first: then `work` is cancelled and Stopped raised,
    so no start-up phase (recovery, registration with an unreachable controller) delays an exit."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    raise Stopped


def lock_directory(directory: Path, owner: str) -> DirectoryLock:
    try:
        return DirectoryLock(directory, owner).acquire()
    except (DirectoryInUse, DirectoryUnusable) as exc:
        raise SystemExit(f"dm: cannot start {owner}: {exc}") from None


async def wait_for_directory(directory: Path, owner: str, wait_s: float, stop: asyncio.Event) -> DirectoryLock:
    """The lock, waiting up to `wait_s` for a holder to exit (a stop signal ends the wait)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return DirectoryLock(directory, owner).acquire()
        except DirectoryUnusable as exc:
            raise SystemExit(f"dm: cannot start {owner}: {exc}") from None
        except DirectoryInUse as exc:
            if time.monotonic() >= deadline or stop.is_set():
                raise SystemExit(f"dm: cannot start {owner}: {exc}") from None
            log.warning("%s; waiting up to %.0fs", exc, deadline - time.monotonic())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), min(1.0, max(deadline - time.monotonic(), 0)))


STORAGE_FAILURE_EXIT = 1
TERMINATION_LOG = Path("/dev/termination-log")  # Kubernetes shows what is written here as the pod's last state


def halt_on_storage_failure(failure: LogDirFailure) -> None:
    """Stops the process at once, as Kafka's Exit.halt does when its log directories fail (ADR 0041): no
    controlled shutdown, no flush, no clean-shutdown marker, nothing more acknowledged. Its controller
    session closes with it, so the partitions it led move to in-sync replicas; the next start recovers the
    logs from what the disk holds."""
    message = (f"dm: {failure}; the broker stops so that nothing it cannot keep is acknowledged. Free space "
               f"or repair the volume, then start it again: it recovers its logs as after a crash.")
    with contextlib.suppress(Exception):
        log.critical("%s", message)
        logging.shutdown()
    if TERMINATION_LOG.exists():
        with contextlib.suppress(OSError):
            TERMINATION_LOG.write_text(message + "\n")
    os._exit(STORAGE_FAILURE_EXIT)


async def serve(config: BrokerConfig, banner: bool = False) -> None:
    stop = _stop_event()
    dir_failure.on_failure(halt_on_storage_failure)
    locks: list[DirectoryLock] = []
    try:
        for directory in config.log_dirs:  # every JBOD directory is this broker's alone
            locks.append(await wait_for_directory(directory, f"dm broker {config.node_id}",
                                                  config["log.dirs.lock.wait.ms"] / 1000, stop))
        await _serve_broker(config, banner, stop)
    finally:
        for lock in locks:
            lock.release()


async def _serve_broker(config: BrokerConfig, banner: bool, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    # num.io.threads: what runs off the event loop (fsync, recovery, compaction, large recompressions)
    loop.set_default_executor(ThreadPoolExecutor(config["num.io.threads"], thread_name_prefix="dm-io"))
    token = config["controller.token"] or os.environ.get("DM_CONTROLLER_TOKEN", "")
    embedded = None
    if config["controller.url"]:
        try:
            context = controller_client_context(config)
        except ConfigError as exc:
            raise SystemExit(f"dm: invalid configuration: {exc}") from None
        client = HttpControllerClient(config["controller.url"], token, ssl_context=context,
                                      server_name=config["controller.tls.server.name"])
    else:
        embedded = await embedded_controller(config)
        embedded.start()
        client = LocalControllerClient(embedded)
    try:
        broker = Broker(config, client)
        rest = RestProxy(broker) if config["http.listeners"] else None
    except ConfigError as exc:
        await client.close()
        raise SystemExit(f"dm: invalid configuration: {exc}") from None

    quotas = ConnectionQuotas(config, broker.security.listeners.inter_broker_listener.name,
                              broker.logs.connection_budget)
    if rest is not None:
        rest.quotas = quotas
    site: BudgetedSite | None = None  # health, metrics
    http_port = config["http.port"]
    if http_port >= 0:
        runner = web.AppRunner(make_app(broker), access_log=None)
        await runner.setup()
        site = BudgetedSite(runner, config["listener.host"], http_port, quotas, on_refused=None,  # counted only
                            header_timeout_s=config["http.request.timeout.ms"] / 1000)
        await site.start()
        http_port = site.port
    servers = [KafkaServer(broker.dispatcher, listener, broker.security, config["socket.request.max.bytes"],
                           config["connections.max.idle.ms"], quotas)
               for listener in broker.security.listeners.listeners]
    try:
        # Whose data is this? Asked before a single log is read or written (ADR 0017).
        await until_stopped(broker.check_identity(), stop)
    except (Stopped, IdentityError) as exc:
        if site is not None:
            await site.cleanup()
        await broker.controller.close()
        if isinstance(exc, Stopped):
            log.info("broker %d stopped during start-up", broker.node_id)
            return
        raise SystemExit(f"dm: broker {broker.node_id} cannot start: {exc}") from None
    try:
        # Recovery blocks on disk reads; run it off the loop so /healthz answers meanwhile. A stop
        # signal ends it at the next partition.
        recovery = loop.run_in_executor(None, broker.recover_logs)
        try:
            await until_stopped(asyncio.shield(recovery), stop)
        except Stopped:
            broker.logs.abort_recovery.set()
            with contextlib.suppress(RecoveryAborted):
                await recovery
            raise
        # The recovered logs are most of what lives as long as the process: collected once and frozen
        # here, before the broker serves, so that full collection holds up no client (ADR 0040).
        tune_gc()
        for server in servers:
            try:
                broker.bound_ports[server.listener.name] = await server.bind()
            except OSError as exc:
                raise SystemExit(f"dm: broker {broker.node_id}: listener {server.listener.name} cannot bind "
                                 f"{server.listener.host or '*'}:{server.listener.port}: {exc.strerror}") from None
        broker.port = broker.bound_ports[broker.security.listeners.inter_broker]
        await until_stopped(broker.start(), stop)
        # Only now, with the cluster's metadata applied: an answer before it would say the cluster's topics
        # do not exist, and librdkafka drops a topic's partitions on that (ADR 0052).
        for server in servers:
            await server.serve()
        if rest is not None:
            try:
                await rest.start()
            except ConfigError as exc:
                raise SystemExit(f"dm: broker {broker.node_id}: {exc}") from None
    except (Stopped, IdentityError) as exc:
        for server in servers:
            await server.close()
        await broker.close()
        if site is not None:
            await site.cleanup()
        if isinstance(exc, IdentityError):
            raise SystemExit(f"dm: broker {broker.node_id} cannot join: {exc}") from None
        log.info("broker %d stopped during start-up", broker.node_id)
        return
    endpoints = broker.registration().listeners
    first = broker.security.listeners.listeners[0].name
    listeners = {"kafka": f"{endpoints[first].host}:{endpoints[first].port}", "http_port": http_port,
                 "node_id": broker.node_id,
                 "listeners": {name: f"{e.host}:{e.port}" for name, e in endpoints.items()},
                 "rest": rest.bound if rest is not None else {}}
    atomic_write(config.data_dir / "__dm_meta" / "listeners.json", json.dumps(listeners).encode())
    log.info("dm broker %d ready: kafka %s, http %s", broker.node_id, listeners["kafka"], http_port)
    for accepted in without_effect(config):
        log.info("accepted without effect: %s", accepted)
    if banner:
        print_banner(listeners["kafka"], http_port)
    print(f"DM_READY {json.dumps(listeners)}", flush=True)
    loop_watch = asyncio.create_task(watch_event_loop(broker.metrics.event_loop_lag, broker.metrics.event_loop_stalls))
    stall_watch = watch_for_stalls(config)

    fatal = asyncio.create_task(broker.fatal_event.wait())
    await asyncio.wait([asyncio.create_task(stop.wait()), fatal], return_when=asyncio.FIRST_COMPLETED)
    log.info("shutting down broker %d", broker.node_id)
    await stop_tasks(loop_watch)
    if stall_watch is not None:
        await stall_watch.stop()
    if embedded is None and not broker.fatal:
        await broker.controlled_shutdown()
    if rest is not None:
        await rest.close()
    for server in servers:
        await server.close()
    await broker.close()
    if site is not None:
        with contextlib.suppress(Exception):
            await site.cleanup()
    if broker.fatal:
        raise SystemExit(f"dm: broker {broker.node_id} stopped: {broker.fatal}")
    log.info("broker %d stopped cleanly", broker.node_id)


def watch_for_stalls(config: BrokerConfig) -> LoopWatchdog | None:
    """A thread that logs where the loop is stuck when it stops turning (event.loop.stall.report.ms)."""
    threshold_ms = config["event.loop.stall.report.ms"]
    if threshold_ms <= 0:
        return None
    watchdog = LoopWatchdog(threshold_s=threshold_ms / 1000, beat_s=min(0.25, threshold_ms / 4000))
    watchdog.start()
    return watchdog


def open_controller_refusal(host: str, token: str) -> str | None:
    """Why a controller must not listen on `host` with this token: its API creates ACLs, changes SCRAM
    credentials and hands SCRAM keys to brokers, so only loopback may go without a token."""
    if token:
        return None
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if loopback:
        return None
    return (f"dm controller refuses to listen on {host} without a token: set controller.token (or --token, "
            "DM_CONTROLLER_TOKEN), or bind it to 127.0.0.1")


async def serve_controller(config: BrokerConfig, port: int, token: str) -> None:
    """`dm controller`: the cluster controller as its own process (file-backed store)."""
    from .controller.controller import Controller, ControllerSettings
    from .controller.http import make_app as controller_app
    from .controller.store import FileControllerStore

    refusal = open_controller_refusal(config["listener.host"], token)
    if refusal:
        raise SystemExit(f"dm: {refusal}")
    stop = _stop_event()
    store_dir = config.data_dir / "controller"
    lock = lock_directory(store_dir, "dm controller")
    try:
        store = FileControllerStore(store_dir)
        controller = await Controller.open(store, expected_brokers=config["controller.recovery.expected.brokers"]
                                           or None, **ControllerSettings.from_config(config).model_dump())
        controller.start()
        tune_gc()
        freezing = asyncio.create_task(freeze_as_it_grows(controller.partition_count))
        stall_watch = watch_for_stalls(config)
        runner = web.AppRunner(controller_app(controller, token), access_log=None)
        await runner.setup()
        try:
            context = controller_server_context(config)
        except ConfigError as exc:
            raise SystemExit(f"dm: invalid configuration: {exc}") from None
        site = web.TCPSite(runner, config["listener.host"], port, ssl_context=context)
        try:
            await site.start()
        except OSError as exc:
            raise SystemExit(f"dm: cannot start dm controller: port {port}: {exc.strerror}") from None
        actual = runner.addresses[0][1]
        scheme = "https" if context is not None else "http"
        log.info("dm controller ready on %s://%s:%d (%d topics)", scheme, config["listener.host"], actual,
                 len(controller.topics))
        print(f"DM_READY {json.dumps({'controller': f'{scheme}://{config.advertised_host}:{actual}'})}", flush=True)
        await stop.wait()
        await stop_tasks(freezing)
        if stall_watch is not None:
            await stall_watch.stop()
        await controller.close()
        await runner.cleanup()
    finally:
        lock.release()


CONTROLLER_LISTENER = "CONTROLLER"  # listener.name.controller.ssl.*: the controller link's TLS (ADR 0021)


def controller_server_context(config: BrokerConfig) -> ssl.SSLContext | None:
    """`dm controller` serves https when listener.name.controller.ssl.keystore.* is set."""
    settings = TlsSettings.for_listener(config, CONTROLLER_LISTENER)
    return server_context(settings) if settings.has_keystore else None


def controller_client_context(config: BrokerConfig) -> ssl.SSLContext | None:
    """A broker verifies an https controller with listener.name.controller.ssl.truststore.* (the
    system's CAs without one) and presents listener.name.controller.ssl.keystore.* if set."""
    if not config["controller.url"].startswith("https://"):
        return None
    return client_context(TlsSettings.for_listener(config, CONTROLLER_LISTENER))


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
    make_private(config.log_dirs)
    tune_malloc()
    install_event_loop_policy()
    asyncio.run(serve(config, banner))


def run_controller(config: BrokerConfig, port: int, token: str) -> None:
    make_private([config.data_dir])
    tune_malloc()
    install_event_loop_policy()
    asyncio.run(serve_controller(config, port, token))
