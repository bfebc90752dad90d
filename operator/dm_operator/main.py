"""`dm-operator`: the kopf operator with the controller API for brokers on one port."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal

import kopf
from aiohttp import web
from dm_broker.loop_watchdog import LoopWatchdog
from kubernetes.config import ConfigException
from pydantic import ValidationError

from .crds import CrdMissing, ensure_crds
from .handlers import register, release_in_terminating_namespaces
from .kube import Kube
from .operator import Operator
from .settings import OperatorSettings

log = logging.getLogger("dm_operator")


def configure(settings: kopf.OperatorSettings, **_: object) -> None:
    # Handler errors are reported in the resources' conditions and the operator's log, not as
    # Kubernetes Events of kopf's own.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 30


async def run(settings: OperatorSettings) -> None:
    try:
        kube = Kube()
    except ConfigException as exc:
        raise SystemExit(f"dm-operator: no Kubernetes credentials (in-cluster or KUBECONFIG): {exc}") from None
    if settings.manage_crds:
        try:
            await ensure_crds(kube)
        except CrdMissing as exc:
            raise SystemExit(f"dm-operator: {exc}") from None
    operator = Operator(settings, kube)
    registry = kopf.OperatorRegistry()
    kopf.on.startup(registry=registry)(configure)
    kopf.on.login(registry=registry)(kopf.login_via_client)
    register(registry, operator)

    runner = web.AppRunner(operator.app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", settings.port).start()
    log.info("dm-operator: controller API, /healthz and /metrics on port %d; watching %s", settings.port,
             ", ".join(settings.namespaces) or "all namespaces")

    # A blocked loop fails the liveness probe and stops every broker's heartbeat: say where.
    watchdog = LoopWatchdog()
    watchdog.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ready = asyncio.Event()

    async def mark_ready() -> None:
        await ready.wait()
        operator.kopf_ready = True

    marker = asyncio.create_task(mark_ready())
    try:
        await kopf.operator(registry=registry, standalone=True, clusterwide=not settings.namespaces,
                            namespaces=settings.namespaces, stop_flag=stop, ready_flag=ready)
    finally:
        marker.cancel()
        await watchdog.stop()
        await release_in_terminating_namespaces(operator)
        await operator.close()
        with contextlib.suppress(Exception):
            await runner.cleanup()


def _cleanup(args: argparse.Namespace) -> None:
    from .cleanup import cleanup

    async def go() -> None:
        kube = Kube()
        try:
            await cleanup(kube, args.cleanup_namespace, args.cluster, args.timeout, args.release)
        finally:
            kube.close()

    asyncio.run(go())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="dm-operator", description="dm's Kubernetes operator")
    parser.add_argument("--namespace", action="append", dest="namespaces",
                        help="namespace to watch (repeatable; default: DM_WATCH_NAMESPACES, or all)")
    parser.add_argument("--port", type=int, help="port of the controller API, /healthz and /metrics (default 9990)")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    sub = parser.add_subparsers(dest="command")
    clean = sub.add_parser("cleanup", help="delete a DMCluster and wait until its Topics are released "
                                           "(the chart's pre-delete hook)")
    clean.add_argument("--namespace", dest="cleanup_namespace", required=True, help="namespace of the DMCluster")
    clean.add_argument("--cluster", required=True, help="name of the DMCluster")
    clean.add_argument("--timeout", type=float, default=120, help="seconds to wait for the operator")
    clean.add_argument("--release", help="also delete this Helm release's test pods")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "cleanup":
        _cleanup(args)
        return
    try:
        settings = OperatorSettings.from_env()
    except ValidationError as exc:
        raise SystemExit(f"dm-operator: invalid settings in the environment: {exc}") from None
    if args.namespaces:
        settings = settings.model_copy(update={"namespaces": args.namespaces})
    if args.port:
        settings = settings.model_copy(update={"port": args.port})
    asyncio.run(run(settings))


if __name__ == "__main__":
    main()
