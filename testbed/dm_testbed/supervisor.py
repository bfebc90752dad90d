"""The testbed process: brings up the host network, the control plane, DNS, the service proxy, the
storage provisioner and the node agent; writes its state file; tears everything down on SIGTERM,
SIGINT, a shutdown request, or when the process that owns it (a test session) is gone."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time

from aiohttp import web

from . import cleanup, network
from .control import make_control_app
from .controlplane import ControlPlane
from .dns import serve_dns
from .kube import Kube
from .kubelet.agent import NodeAgent
from .kubelet.api import serve_kubelet_api
from .proxy import ServiceProxy
from .settings import TestbedSettings
from .storage import LocalPathProvisioner

log = logging.getLogger(__name__)


def write_state(settings: TestbedSettings, **fields: object) -> None:
    current = cleanup.read_state(settings)
    current.update(fields)
    tmp = settings.state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(current, indent=2))
    os.replace(tmp, settings.state_file)


async def _owner_gone(owner_pid: int) -> None:
    while True:
        await asyncio.sleep(1)
        try:
            os.kill(owner_pid, 0)
        except ProcessLookupError:
            log.info("owner process %d is gone; stopping", owner_pid)
            return


async def run(settings: TestbedSettings, owner_pid: int | None = None) -> None:
    started = time.monotonic()
    found = cleanup.clean(settings)
    if found:
        log.warning("removed leftovers of an earlier run: %s", found)
    settings.run_dir.mkdir(parents=True, exist_ok=True)
    (settings.run_dir / "logs").mkdir(exist_ok=True)
    write_state(settings, pid=os.getpid(), phase="starting", owner_pid=owner_pid,
                kubeconfig=str(settings.kubeconfig), bin_dir=str(settings.bin_dir))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    cp = ControlPlane(settings)
    kube: Kube | None = None
    agent: NodeAgent | None = None
    provisioner: LocalPathProvisioner | None = None
    proxy: ServiceProxy | None = None
    dns_transport = None
    runners: list[web.AppRunner] = []
    try:
        await network.setup_host(settings)
        creds = await cp.start()
        control_plane_s = time.monotonic() - started
        kube = Kube(creds.server, cp.ssl_context())
        dns, dns_transport = await serve_dns(settings.gateway_ip)
        proxy = ServiceProxy(lambda ip: network.add_service_ip(settings, ip),
                             lambda ip: network.remove_service_ip(settings, ip))
        provisioner = LocalPathProvisioner(kube, settings.run_dir / "pv")
        await provisioner.start()
        agent = NodeAgent(settings, kube, dns.update, proxy.sync)
        for node in agent.nodes.values():
            runners.append(await serve_kubelet_api(agent, node.name, settings.gateway_ip,
                                                   settings.kubelet_port + node.index, creds.kubelet_serving.cert,
                                                   creds.kubelet_serving.key))
        await agent.start()
        control = web.AppRunner(make_control_app(agent, stop.set), access_log=None)
        await control.setup()
        await web.UnixSite(control, str(settings.control_socket)).start()
        runners.append(control)
        write_state(settings, phase="ready", startup_seconds=round(time.monotonic() - started, 2),
                    control_plane_seconds=round(control_plane_s, 2), server=creds.server,
                    timings=cp.timings)
        log.info("testbed ready in %.1fs (control plane %.1fs)", time.monotonic() - started, control_plane_s)
        waiters = [asyncio.create_task(stop.wait())]
        if owner_pid:
            waiters.append(asyncio.create_task(_owner_gone(owner_pid)))
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for w in waiters:
            w.cancel()
    except Exception as exc:
        log.exception("testbed failed")
        write_state(settings, phase="failed", error=str(exc))
        raise
    finally:
        log.info("tearing down")
        write_state(settings, phase="stopping")
        if agent is not None:
            await agent.stop()
        if provisioner is not None:
            await provisioner.stop()
        for runner in runners:
            with contextlib.suppress(Exception):
                await runner.cleanup()
        if proxy is not None:
            await proxy.close()
        if dns_transport is not None:
            dns_transport.close()
        if kube is not None:
            await kube.close()
        await cp.stop()
        await network.ip("link", "del", settings.bridge, check=False)
        network.remove_leftovers(settings)
        write_state(settings, phase="stopped", pid=None)
        log.info("testbed stopped")
