"""Per node of a kind cluster built offline, what kind's own node images run as add-ons Debian does
not package: pod networking (kindnetd's job) and node-local persistent volumes (the local-path
provisioner's job). It runs as a DaemonSet (host network, host PID, privileged) on every node:

- networking: the node's pod CIDR (assigned by the controller manager) becomes the CNI config of
  Debian's bridge, host-local and portmap plugins; every other node's pod CIDR gets a route through
  that node's address; pod traffic leaving the cluster's pod network is masqueraded.
- volumes: claims of the default StorageClass whose pod the scheduler put on this node get a
  directory here and a `local` PersistentVolume pinned to the node (the kubelet then applies the
  pod's fsGroup, as on any cluster with local volumes); a released volume is deleted with its data.

Commands that change the node (ip, iptables) run in the node's own mount namespace (nsenter into
PID 1), so they use the node's binaries and its iptables backend."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Any

from ..kube import Informer, Kube
from ..storage import LocalPathProvisioner

log = logging.getLogger("dm-kind-node")
Obj = dict[str, Any]
MASQUERADE_COMMENT = "dm-kind-node: pod traffic leaving the pod network"


def bridge_conflist(pod_cidr: str) -> Obj:
    """The CNI configuration of a node whose pods get addresses from `pod_cidr` (pure)."""
    return {
        "cniVersion": "0.4.0", "name": "dm-kind-bridge",
        "plugins": [
            # hairpinMode: a pod reaches itself through a Service address (a broker through its bootstrap Service).
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": pod_cidr}]], "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def internal_ip(node: Obj) -> str | None:
    return next((a["address"] for a in node.get("status", {}).get("addresses", []) if a["type"] == "InternalIP"),
                None)


def routes_to_peers(nodes: list[Obj], me: str) -> dict[str, str]:
    """Pod CIDR -> the address of the node that holds it, for every node but `me` (pure)."""
    routes = {}
    for node in nodes:
        cidr, via = node.get("spec", {}).get("podCIDR"), internal_ip(node)
        if node["metadata"]["name"] != me and cidr and via:
            routes[cidr] = via
    return routes


async def on_node(*argv: str) -> None:
    """Runs a command in the node's mount and network namespaces; fails loudly."""
    proc = await asyncio.create_subprocess_exec("nsenter", "--target", "1", "--mount", "--net", "--", *argv,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {proc.returncode}: {out.decode().strip()}")


class Network:
    def __init__(self, me: str, cni_dir: Path, pod_subnet: str) -> None:
        self.me = me
        self.conflist = cni_dir / "10-dm-kind-bridge.conflist"
        self.pod_subnet = pod_subnet
        self.routes: dict[str, str] = {}

    async def masquerade(self) -> None:
        rule = ["POSTROUTING", "-s", self.pod_subnet, "!", "-d", self.pod_subnet, "-m", "comment", "--comment",
                MASQUERADE_COMMENT, "-j", "MASQUERADE"]
        try:
            await on_node("iptables", "-t", "nat", "-C", *rule)
        except RuntimeError:
            await on_node("iptables", "-t", "nat", "-A", *rule)

    async def sync(self, nodes: list[Obj]) -> None:
        mine = next((n for n in nodes if n["metadata"]["name"] == self.me), None)
        cidr = (mine or {}).get("spec", {}).get("podCIDR")
        if cidr:
            text = json.dumps(bridge_conflist(cidr), indent=2)
            if not self.conflist.exists() or self.conflist.read_text() != text:
                tmp = self.conflist.with_suffix(".tmp")
                tmp.write_text(text)
                tmp.rename(self.conflist)
                log.info("pods of %s get addresses from %s", self.me, cidr)
        wanted = routes_to_peers(nodes, self.me)
        for dest, via in wanted.items():
            if self.routes.get(dest) != via:
                await on_node("ip", "route", "replace", dest, "via", via)
                log.info("route to %s via %s", dest, via)
        for dest in set(self.routes) - set(wanted):
            try:
                await on_node("ip", "route", "del", dest)
            except RuntimeError as exc:
                log.warning("%s", exc)
        self.routes = wanted


async def run() -> None:
    me = os.environ["NODE_NAME"]
    kube = Kube.in_cluster()
    network = Network(me, Path(os.environ.get("CNI_CONF_DIR", "/etc/cni/net.d")),
                      os.environ.get("POD_SUBNET", "10.244.0.0/16"))
    await network.masquerade()
    changed = asyncio.Event()
    nodes = Informer(kube, "/api/v1/nodes", lambda kind, obj: changed.set())
    volumes = LocalPathProvisioner(kube, Path(os.environ.get("VOLUMES_ROOT", "/var/local-path-provisioner")),
                                   node=me, create_storage_class=False)

    async def keep_network() -> None:
        while True:
            await changed.wait()
            changed.clear()
            try:
                await network.sync(list(nodes.cache.values()))
            except RuntimeError as exc:
                log.error("%s; trying again", exc)
                await asyncio.sleep(1)
                changed.set()

    await volumes.start()
    log.info("serving node %s", me)
    await asyncio.gather(nodes.run(), keep_network())


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(run())


if __name__ == "__main__":
    main()
