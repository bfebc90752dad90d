"""Pod networking with iproute2: a host bridge for the pod network, one network namespace and veth
pair per pod. Service cluster IPs are extra /32 addresses of the bridge (the userspace proxy listens
on them), so they vanish with it.

Nothing here touches iptables: pods reach each other over the bridge, and the host (DNS, the
service proxy, the API server) on the bridge's address. All names start with the testbed prefix
so a stale run's leftovers can be found and removed."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import subprocess
from pathlib import Path

from .settings import TestbedSettings


class NetworkError(RuntimeError):
    pass


async def ip(*args: str, check: bool = True) -> str:
    proc = await asyncio.create_subprocess_exec("ip", *args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    if check and proc.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {err.decode().strip()}")
    return out.decode()


def ip_sync(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


def netns_name(settings: TestbedSettings, pod_uid: str) -> str:
    return f"{settings.prefix}-{pod_uid.replace('-', '')[:12]}"


def host_veth_name(settings: TestbedSettings, pod_uid: str) -> str:
    return f"{settings.prefix}{pod_uid.replace('-', '')[:10]}"  # 14 characters: IFNAMSIZ is 16 with NUL


def netns_path(name: str) -> str:
    return f"/run/netns/{name}"


class IpPool:
    """Hands out pod addresses from one node's /24."""

    def __init__(self, network: ipaddress.IPv4Network) -> None:
        self.free = [str(a) for a in network.hosts()]
        self.used: set[str] = set()

    def take(self) -> str:
        for addr in self.free:
            if addr not in self.used:
                self.used.add(addr)
                return addr
        raise NetworkError("no pod addresses left on this node")

    def give_back(self, addr: str) -> None:
        self.used.discard(addr)


async def setup_host(s: TestbedSettings) -> None:
    await ip("link", "add", s.bridge, "type", "bridge")
    await ip("addr", "add", f"{s.gateway_ip}/{s.pod_prefixlen}", "dev", s.bridge)
    await ip("link", "set", s.bridge, "up")


async def create_pod_network(s: TestbedSettings, pod_uid: str, address: str) -> str:
    """Creates the pod's namespace with eth0 at `address`; returns the namespace's name."""
    ns = netns_name(s, pod_uid)
    veth = host_veth_name(s, pod_uid)
    await ip("netns", "add", ns)
    try:
        await ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        await ip("link", "set", veth, "master", s.bridge, "up")
        await ip("-n", ns, "link", "set", "lo", "up")
        await ip("-n", ns, "addr", "add", f"{address}/{s.pod_prefixlen}", "dev", "eth0")
        await ip("-n", ns, "link", "set", "eth0", "up")
        await ip("-n", ns, "route", "add", "default", "via", s.gateway_ip)
    except NetworkError:
        await delete_pod_network(s, pod_uid)
        raise
    return ns


async def delete_pod_network(s: TestbedSettings, pod_uid: str) -> None:
    await ip("link", "del", host_veth_name(s, pod_uid), check=False)
    await ip("netns", "del", netns_name(s, pod_uid), check=False)


async def set_pod_link(s: TestbedSettings, pod_uid: str, up: bool) -> None:
    """Cuts (down) or heals (up) a pod's network at its host-side veth: packets are silently lost,
    connections are not reset, as in a real network partition."""
    await ip("link", "set", host_veth_name(s, pod_uid), "up" if up else "down")


async def add_service_ip(s: TestbedSettings, address: str) -> None:
    await ip("addr", "replace", f"{address}/32", "dev", s.bridge)


async def remove_service_ip(s: TestbedSettings, address: str) -> None:
    await ip("addr", "del", f"{address}/32", "dev", s.bridge, check=False)


def leftovers(s: TestbedSettings) -> dict[str, list[str]]:
    """Network namespaces and links of any testbed run that still exist (synchronous: used by
    clean-up and by tests)."""
    netns = [line.split()[0] for line in ip_sync("netns", "list").stdout.splitlines()
             if line.startswith(s.prefix)]
    links = []
    out = ip_sync("-j", "link", "show").stdout
    with contextlib.suppress(json.JSONDecodeError):
        links = [link["ifname"] for link in json.loads(out or "[]") if link["ifname"].startswith(s.prefix)]
    return {"netns": netns, "links": links}


def netns_pids(name: str) -> list[int]:
    out = ip_sync("netns", "pids", name).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def remove_leftovers(s: TestbedSettings) -> None:
    from .processes import kill_and_wait

    found = leftovers(s)
    for ns in found["netns"]:
        kill_and_wait(netns_pids(ns))
        ip_sync("netns", "del", ns)
        with contextlib.suppress(OSError):
            Path(netns_path(ns)).unlink()
    for link in found["links"]:
        ip_sync("link", "del", link)
