"""Service cluster IPs without kube-proxy or iptables: each cluster IP is an address of the pod
bridge on the host, and a userspace proxy (what kube-proxy's `userspace` mode did) listens on every
Service port there and relays each TCP connection to a ready endpoint, round robin. Pods reach
cluster IPs through their default route (the host), and so does the host itself."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)
Obj = dict[str, Any]


@dataclass
class ServicePort:
    namespace: str
    service: str
    port_name: str
    targets: list[tuple[str, int]] = field(default_factory=list)
    rr: itertools.count = field(default_factory=itertools.count)

    def pick(self) -> tuple[str, int] | None:
        if not self.targets:
            return None
        return self.targets[next(self.rr) % len(self.targets)]


def desired_listeners(services: list[Obj], endpoints: list[Obj]) -> dict[tuple[str, int], ServicePort]:
    """(cluster IP, port) -> where its connections go (pure)."""
    by_key = {(e["metadata"]["namespace"], e["metadata"]["name"]): e for e in endpoints}
    out: dict[tuple[str, int], ServicePort] = {}
    for svc in services:
        ip = svc["spec"].get("clusterIP")
        if not ip or ip == "None" or svc["spec"].get("type") == "ExternalName":
            continue
        ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
        ep = by_key.get((ns, name), {})
        for port in svc["spec"].get("ports", []):
            if port.get("protocol", "TCP") != "TCP":
                continue
            sp = ServicePort(ns, name, port.get("name", ""))
            for subset in ep.get("subsets") or []:
                numbers = [p["port"] for p in subset.get("ports") or [] if p.get("name", "") == sp.port_name]
                for address in subset.get("addresses") or []:
                    sp.targets += [(address["ip"], n) for n in numbers]
            out[(ip, int(port["port"]))] = sp
    return out


class ServiceProxy:
    def __init__(self, add_ip: Callable[[str], Awaitable[None]], remove_ip: Callable[[str], Awaitable[None]]) -> None:
        self.add_ip = add_ip
        self.remove_ip = remove_ip
        self.routes: dict[tuple[str, int], ServicePort] = {}
        self.servers: dict[tuple[str, int], asyncio.Server] = {}
        self.ips: set[str] = set()
        self._lock = asyncio.Lock()

    async def sync(self, services: list[Obj], endpoints: list[Obj]) -> None:
        async with self._lock:
            wanted = desired_listeners(services, endpoints)
            for key in list(self.servers):
                if key not in wanted:
                    self.servers.pop(key).close()
            wanted_ips = {ip for ip, _ in wanted}
            for ip in wanted_ips - self.ips:
                await self.add_ip(ip)
            for ip in self.ips - wanted_ips:
                await self.remove_ip(ip)
            self.ips = wanted_ips
            for key, route in wanted.items():
                old = self.routes.get(key)
                if old is not None:
                    route.rr = old.rr
                self.routes[key] = route
                if key not in self.servers:
                    try:
                        self.servers[key] = await asyncio.start_server(
                            lambda r, w, k=key: self._relay(k, r, w), key[0], key[1], reuse_address=True)
                    except OSError as exc:
                        log.warning("cannot listen on %s:%d for %s/%s: %s", *key, route.namespace, route.service, exc)
            for key in list(self.routes):
                if key not in wanted:
                    del self.routes[key]

    async def _relay(self, key: tuple[str, int], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        route = self.routes.get(key)
        target = route.pick() if route else None
        if target is None:
            writer.close()  # no ready endpoint: the connection is refused, as with kube-proxy's REJECT
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(*target), 5)
        except (OSError, TimeoutError):
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer), return_exceptions=True)
        for w in (writer, up_writer):
            w.close()

    async def close(self) -> None:
        for server in self.servers.values():
            server.close()
        self.servers.clear()
        for ip in self.ips:
            await self.remove_ip(ip)
        self.ips.clear()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (OSError, ConnectionError):
        pass
    finally:
        with contextlib.suppress(Exception):
            if writer.can_write_eof():
                writer.write_eof()
            else:
                writer.close()
