"""`dm-operator`: the kopf operator with the controller API for brokers on one port."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import socket
import time
import uuid

import kopf
import urllib3
from aiohttp import web
from dm_broker.gc_tuning import freeze_as_it_grows, tune_gc
from dm_broker.loop_watchdog import LoopWatchdog
from dm_broker.tasks import stop_tasks
from kubernetes.config import ConfigException

from .crds import CrdMissing
from .handlers import register
from .kube import ApiError, Kube
from .leadership import ElectionTiming, LeaderElector, mark_pod
from .metrics import ELECTED, LEADER_EPOCH, LEADING
from .operator import Operator
from .settings import OperatorSettings
from .topics import release_in_terminating_namespaces

log = logging.getLogger("dm_operator")


def configure(settings: kopf.OperatorSettings, **_: object) -> None:
    # Handler errors are reported in the resources' conditions and the operator's log, not as
    # Kubernetes Events of kopf's own.
    settings.posting.level = logging.WARNING
    # Every watch event's handler reports success at INFO: thousands of lines a minute on a failover.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 30


async def run(settings: OperatorSettings) -> None:
    try:
        kube = Kube()
    except ConfigException as exc:
        raise SystemExit(f"dm-operator: no Kubernetes credentials (in-cluster or KUBECONFIG): {exc}") from None
    operator = Operator(settings, kube)
    runner = web.AppRunner(operator.app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", settings.port).start()
    # The same API over TLS, for secured clusters: each answered with its cluster CA's certificate (SNI)
    await web.TCPSite(runner, "0.0.0.0", settings.tls_port, ssl_context=operator.controller_tls.context).start()
    log.info("dm-operator: controller API, /healthz, /readyz and /metrics on port %d (the controller API over TLS "
             "on %d); watching %s", settings.port, settings.tls_port,
             ", ".join(settings.namespaces) or "all namespaces")

    # A blocked loop fails the liveness probe and stops every broker's heartbeat: say where.
    watchdog = LoopWatchdog()
    watchdog.start()
    # The clusters' controllers run here: their partitions are this process's long-lived objects, and
    # full collections that visit them held the loop for 0.1-0.3 s at 10,000 partitions (ADR 0040).
    tune_gc()
    freezing = asyncio.create_task(freeze_as_it_grows(operator.partition_count, long_lived=operator.long_lived))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    elector = _elector(settings, kube)
    lost: list[str] = []
    try:
        if elector is not None:
            # A restarted leader's pod may still carry the leader label, and the Service would send brokers
            # here: the instance is Ready (a standby) only once the label is gone.
            unmark = asyncio.create_task(_unmark_until_done(settings, kube, operator))
            if not await elector.acquire(stop):
                await stop_tasks(unmark)
                return
            await unmark
        operator.role = "leader"
        LEADING.set(1)
        ELECTED.set(time.time())
        LEADER_EPOCH.set(elector.epoch if elector is not None else 0)
        await _lead(settings, kube, operator, stop, elector, lost)
    finally:
        LEADING.set(0)
        await stop_tasks(freezing)
        await watchdog.stop()
        await operator.close()
        if elector is not None and not lost:
            await _mark_leader(settings, kube, False)
            await elector.release()
        with contextlib.suppress(Exception):
            await runner.cleanup()
        kube.close()
    if lost:
        # As client-go's leader election: a former leader exits, and its restart stands by.
        raise SystemExit(f"dm-operator: lost leadership: {lost[0]}")


def _elector(settings: OperatorSettings, kube: Kube) -> LeaderElector | None:
    if not settings.leader_election:
        return None
    identity = f"{settings.pod_name or socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    timing = ElectionTiming(settings.lease_duration_s, settings.lease_renew_deadline_s, settings.lease_retry_period_s)
    return LeaderElector(kube, settings.lease_namespace, settings.lease_name, identity, timing)


async def _mark_leader(settings: OperatorSettings, kube: Kube, leading: bool) -> bool:
    if not settings.pod_name:
        return True
    try:
        await mark_pod(kube, settings.lease_namespace, settings.pod_name, leading)
        return True
    except (ApiError, OSError, urllib3.exceptions.HTTPError) as exc:
        log.warning("cannot %s the leader label on pod %s: %s", "set" if leading else "remove", settings.pod_name,
                    exc)
        return False


async def _unmark_until_done(settings: OperatorSettings, kube: Kube, operator: Operator) -> None:
    while not await _mark_leader(settings, kube, False):
        await asyncio.sleep(1)
    if operator.role == "starting":
        operator.role = "standby"


async def _resync(operator: Operator, interval_s: float) -> None:
    """Every collection of the watch cache is listed again now and then (what a watch missed)."""
    while True:
        await asyncio.sleep(interval_s)
        operator.cache.expire()


async def _lead(settings: OperatorSettings, kube: Kube, operator: Operator, stop: asyncio.Event,
                elector: LeaderElector | None, lost: list[str]) -> None:
    """The leader's work: CRDs at this operator's schema (never back), then kopf's watches feeding the
    clusters' runtimes and controllers until `stop` (a signal, or leadership lost)."""
    if settings.manage_crds:
        try:
            await operator.crd_versions.ensure(kube)
        except CrdMissing as exc:
            raise SystemExit(f"dm-operator: {exc}") from None
    registry = kopf.OperatorRegistry()
    kopf.on.startup(registry=registry)(configure)
    kopf.on.login(registry=registry)(kopf.login_via_client)
    register(registry, operator)
    ready = asyncio.Event()

    def on_lost(why: str) -> None:
        log.error("dm-operator: %s; stopping the controllers", why)
        lost.append(why)
        stop.set()

    async def mark_ready() -> None:
        await ready.wait()
        # kopf took SIGTERM and SIGINT over when it started; the operator stops in its own order.
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        operator.kopf_ready = True
        if elector is not None:
            await _mark_leader(settings, kube, True)
        await release_in_terminating_namespaces(kube, settings.namespaces)

    kopf_stop = asyncio.Event()

    async def stop_in_order() -> None:
        # The controllers first (their brokers' sessions and long-polls end), kopf's watches after: kopf
        # gives whatever else still runs 5 s and then cancels it, which would hold the Lease that long.
        await stop.wait()
        await operator.close()
        kopf_stop.set()

    tasks = [asyncio.create_task(mark_ready()), asyncio.create_task(_resync(operator, settings.resync_interval_s)),
             asyncio.create_task(stop_in_order())]
    if elector is not None:
        tasks.append(asyncio.create_task(elector.keep(on_lost)))
    try:
        await kopf.operator(registry=registry, standalone=True, clusterwide=not settings.namespaces,
                            namespaces=settings.namespaces, stop_flag=kopf_stop, ready_flag=ready)
    finally:
        await stop_tasks(*tasks)
        if not lost:
            await release_in_terminating_namespaces(kube, settings.namespaces)


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
    clean = sub.add_parser("cleanup", help="delete a DMCluster and take off earlier versions' finalizers "
                                           "of its Topics and Users (the chart's pre-delete hook)")
    clean.add_argument("--namespace", dest="cleanup_namespace", required=True, help="namespace of the DMCluster")
    clean.add_argument("--cluster", required=True, help="name of the DMCluster")
    clean.add_argument("--timeout", type=float, default=120, help="seconds to wait for the DMCluster to go")
    clean.add_argument("--release", help="also delete this Helm release's test pods")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "cleanup":
        _cleanup(args)
        return
    try:
        settings = OperatorSettings.from_env()
    except ValueError as exc:  # pydantic's ValidationError included
        raise SystemExit(f"dm-operator: invalid settings in the environment: {exc}") from None
    if args.namespaces:
        settings = settings.model_copy(update={"namespaces": args.namespaces})
    if args.port:
        settings = settings.model_copy(update={"port": args.port})
    asyncio.run(run(settings))


if __name__ == "__main__":
    main()
