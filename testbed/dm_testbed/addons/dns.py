"""Cluster DNS for a kind cluster built offline, standing in for CoreDNS (which Debian does not
package): kubeadm deploys it as its `coredns` Deployment, so it answers on port 53 (UDP and TCP), says
it is alive on :8080/health and ready on :8181/ready, and ignores CoreDNS's `-conf` argument.

It serves what pods ask a cluster DNS for: `<service>.<namespace>.svc.<domain>` (the cluster IP, or
the ready endpoints of a headless Service), `<hostname>.<service>.<namespace>.svc.<domain>` (a
StatefulSet pod through its governing Service) and `<a-b-c-d>.<namespace>.pod.<domain>`. Any other
name is NXDOMAIN at once: the machine this runs on has no outside network to forward to."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import struct
from typing import Any

from aiohttp import web
from dnslib import QTYPE, RCODE, RR, A, DNSRecord

from ..kube import Informer, Kube

log = logging.getLogger("dm-dns")
Obj = dict[str, Any]
TTL = 5


def dns_records(services: list[Obj], endpoints: list[Obj], domain: str) -> dict[str, list[str]]:
    """Name -> addresses, from the Services and Endpoints (pure)."""
    records: dict[str, list[str]] = {}
    by_key = {(e["metadata"]["namespace"], e["metadata"]["name"]): e for e in endpoints}
    for svc in services:
        ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
        fqdn = f"{name}.{ns}.svc.{domain}"
        cluster_ip = svc["spec"].get("clusterIP")
        ep = by_key.get((ns, name), {})
        addresses = [a for subset in ep.get("subsets") or [] for a in subset.get("addresses") or []]
        if cluster_ip and cluster_ip != "None":
            records[fqdn] = [cluster_ip]
        else:
            records[fqdn] = sorted({a["ip"] for a in addresses})
            for a in addresses:
                if a.get("hostname"):
                    records.setdefault(f"{a['hostname']}.{fqdn}", []).append(a["ip"])
    return records


def pod_address(name: str, domain: str) -> str | None:
    """`10-244-1-5.<namespace>.pod.<domain>` -> 10.244.1.5 (CoreDNS's `pods insecure`)."""
    labels = name.split(".")
    if len(labels) != 3 + len(domain.split(".")) or ".".join(labels[2:]) != f"pod.{domain}":
        return None
    try:
        return str(ipaddress.IPv4Address(labels[0].replace("-", ".")))
    except ValueError:
        return None


class Resolver:
    def __init__(self, domain: str) -> None:
        self.domain = domain
        self.records: dict[str, list[str]] = {}

    def answer(self, data: bytes) -> bytes | None:
        try:
            request = DNSRecord.parse(data)
        except Exception:  # not DNS: nothing to answer
            return None
        reply = request.reply()
        for q in request.questions:
            name = str(q.qname).rstrip(".").lower()
            pod = pod_address(name, self.domain)
            addresses = [pod] if pod else self.records.get(name)
            if addresses is None:
                reply.header.rcode = RCODE.NXDOMAIN
                continue
            if q.qtype in (QTYPE.A, QTYPE.ANY):
                for ip in addresses:
                    reply.add_answer(RR(q.qname, QTYPE.A, rdata=A(ip), ttl=TTL))
            # Other types of a known name: an empty answer (NOERROR), so resolvers asking for AAAA
            # too do not conclude that the name does not exist.
        return reply.pack()


class UdpServer(asyncio.DatagramProtocol):
    def __init__(self, resolver: Resolver) -> None:
        self.resolver = resolver
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        response = self.resolver.answer(data)
        if response is not None and self.transport is not None:
            self.transport.sendto(response, addr)


async def serve_tcp(resolver: Resolver, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """DNS over TCP: each message prefixed by its length (RFC 1035 4.2.2)."""
    try:
        while True:
            size = struct.unpack("!H", await reader.readexactly(2))[0]
            response = resolver.answer(await reader.readexactly(size))
            if response is None:
                break
            writer.write(struct.pack("!H", len(response)) + response)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def run(domain: str, port: int) -> None:
    kube = Kube.in_cluster()
    resolver = Resolver(domain)
    changed = asyncio.Event()
    services = Informer(kube, "/api/v1/services", lambda kind, obj: changed.set())
    endpoints = Informer(kube, "/api/v1/endpoints", lambda kind, obj: changed.set())

    loop = asyncio.get_running_loop()
    await loop.create_datagram_endpoint(lambda: UdpServer(resolver), local_addr=("0.0.0.0", port))
    await asyncio.start_server(lambda r, w: serve_tcp(resolver, r, w), "0.0.0.0", port)

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def ready(_: web.Request) -> web.Response:
        synced = services.synced.is_set() and endpoints.synced.is_set()
        return web.Response(text="OK" if synced else "not synced", status=200 if synced else 503)

    for probe_port, path, handler in ((8080, "/health", health), (8181, "/ready", ready)):
        app = web.Application()
        app.router.add_get(path, handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "0.0.0.0", probe_port).start()
    log.info("serving %s on port %d", domain, port)

    async def rebuild() -> None:
        while True:
            await changed.wait()
            changed.clear()
            resolver.records = dns_records(list(services.cache.values()), list(endpoints.cache.values()), domain)
            await asyncio.sleep(0.05)  # one rebuild for a burst of changes

    await asyncio.gather(services.run(), endpoints.run(), rebuild())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-conf", help="CoreDNS's Corefile (ignored)")
    parser.add_argument("--domain", default="cluster.local")
    parser.add_argument("--port", type=int, default=53)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(run(args.domain, args.port))


if __name__ == "__main__":
    main()
