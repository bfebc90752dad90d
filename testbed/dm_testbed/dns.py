"""Cluster DNS for the pods (what CoreDNS does in a cluster): A records for Services (their cluster
IP, or the ready endpoints of a headless Service), for StatefulSet-style pod names
(`<hostname>.<service>.<namespace>.svc.<domain>`) and for `<a-b-c-d>.<namespace>.pod.<domain>`.
Served over UDP on the pod bridge's address; pods use it through their /etc/resolv.conf."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from dnslib import QTYPE, RCODE, RR, A, DNSRecord

log = logging.getLogger(__name__)
Obj = dict[str, Any]
TTL = 5


def dns_records(services: list[Obj], endpoints: list[Obj], pods: list[Obj], domain: str) -> dict[str, list[str]]:
    """Name -> addresses, from the API objects (pure)."""
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
    for pod in pods:
        ip = pod.get("status", {}).get("podIP")
        if ip:
            records[f"{ip.replace('.', '-')}.{pod['metadata']['namespace']}.pod.{domain}"] = [ip]
    return records


class DnsServer(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.records: dict[str, list[str]] = {}
        self.transport: asyncio.DatagramTransport | None = None

    def update(self, records: dict[str, list[str]]) -> None:
        self.records = records

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def answer(self, data: bytes) -> bytes | None:
        try:
            request = DNSRecord.parse(data)
        except Exception:  # not DNS: nothing to answer
            return None
        reply = request.reply()
        for q in request.questions:
            name = str(q.qname).rstrip(".").lower()
            addresses = self.records.get(name)
            if addresses is None:
                reply.header.rcode = RCODE.NXDOMAIN
                continue
            if q.qtype in (QTYPE.A, QTYPE.ANY):
                for ip in addresses:
                    reply.add_answer(RR(q.qname, QTYPE.A, rdata=A(ip), ttl=TTL))
            # Other types of a known name: an empty answer (NOERROR), so resolvers asking for AAAA
            # too do not conclude the name does not exist.
        return reply.pack()

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        response = self.answer(data)
        if response is not None and self.transport is not None:
            self.transport.sendto(response, addr)


async def serve_dns(host: str, port: int = 53) -> tuple[DnsServer, asyncio.DatagramTransport]:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_datagram_endpoint(DnsServer, local_addr=(host, port))
    return protocol, transport
