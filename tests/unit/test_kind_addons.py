"""The add-ons of the offline kind node image (testbed/dm_testbed/addons), their pure parts: the names
the cluster DNS answers and how, the CNI config and routes each node gets, the volume a claim gets and
when it grows.
The e2e suite runs them for real (every pod there resolves, routes and mounts through them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dm_testbed.addons.dns import Resolver, dns_records, pod_address
from dm_testbed.addons.node import bridge_conflist, routes_to_peers
from dm_testbed.storage import (
    FS_RESIZE_PENDING,
    NODE_LABEL,
    expansion_mode,
    growth,
    mounts_grown,
    quantity,
    resize_done,
    resize_pending,
    storage_classes,
    volume_for,
)
from dnslib import QTYPE, RCODE, DNSRecord


def service(ns: str, name: str, cluster_ip: str) -> dict:
    return {"metadata": {"namespace": ns, "name": name}, "spec": {"clusterIP": cluster_ip}}


def endpoints(ns: str, name: str, *addresses: tuple[str, str | None]) -> dict:
    return {"metadata": {"namespace": ns, "name": name},
            "subsets": [{"addresses": [{"ip": ip, **({"hostname": h} if h else {})} for ip, h in addresses]}]}


def test_services_headless_services_and_statefulset_pods_resolve() -> None:
    records = dns_records(
        [service("ns", "demo-bootstrap", "10.96.0.20"), service("ns", "demo-brokers", "None")],
        [endpoints("ns", "demo-brokers", ("10.244.1.5", "demo-broker-0"), ("10.244.2.7", "demo-broker-1")),
         endpoints("ns", "demo-bootstrap", ("10.244.1.5", None))],
        "cluster.local")
    assert records["demo-bootstrap.ns.svc.cluster.local"] == ["10.96.0.20"]
    assert records["demo-brokers.ns.svc.cluster.local"] == ["10.244.1.5", "10.244.2.7"]
    assert records["demo-broker-1.demo-brokers.ns.svc.cluster.local"] == ["10.244.2.7"]
    assert pod_address("10-244-1-5.ns.pod.cluster.local", "cluster.local") == "10.244.1.5"
    assert pod_address("10-244-1-500.ns.pod.cluster.local", "cluster.local") is None
    assert pod_address("demo.ns.svc.cluster.local", "cluster.local") is None


def ask(resolver: Resolver, name: str, qtype: str = "A") -> DNSRecord:
    answer = resolver.answer(DNSRecord.question(name, qtype).pack())
    assert answer is not None
    return DNSRecord.parse(answer)


def test_the_resolver_answers_known_names_and_refuses_the_rest_at_once() -> None:
    resolver = Resolver("cluster.local")
    resolver.records = {"demo-bootstrap.ns.svc.cluster.local": ["10.96.0.20"]}
    a = ask(resolver, "demo-bootstrap.ns.svc.cluster.local")
    assert [str(r.rdata) for r in a.rr] == ["10.96.0.20"] and a.rr[0].rtype == QTYPE.A
    aaaa = ask(resolver, "demo-bootstrap.ns.svc.cluster.local", "AAAA")  # known name, no IPv6: empty NOERROR
    assert aaaa.header.rcode == RCODE.NOERROR and not aaaa.rr
    # A search-path expansion or an outside name: NXDOMAIN, so resolvers move on without waiting.
    assert ask(resolver, "demo-bootstrap.ns.svc.cluster.local.ns.svc.cluster.local").header.rcode == RCODE.NXDOMAIN
    assert ask(resolver, "pypi.org").header.rcode == RCODE.NXDOMAIN
    assert resolver.answer(b"not dns") is None


def node(name: str, cidr: str | None, ip: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"podCIDR": cidr} if cidr else {},
            "status": {"addresses": [{"type": "Hostname", "address": name}, {"type": "InternalIP", "address": ip}]}}


def test_each_node_routes_to_the_other_nodes_pod_cidrs() -> None:
    nodes = [node("cp", "10.244.0.0/24", "172.18.0.4"), node("w1", "10.244.1.0/24", "172.18.0.2"),
             node("w2", None, "172.18.0.3")]  # no CIDR allocated yet: no route
    assert routes_to_peers(nodes, "w1") == {"10.244.0.0/24": "172.18.0.4"}
    assert routes_to_peers(nodes, "cp") == {"10.244.1.0/24": "172.18.0.2"}


def test_the_cni_config_gives_pods_addresses_from_the_nodes_cidr_and_hairpin() -> None:
    conf = bridge_conflist("10.244.3.0/24")
    bridge = conf["plugins"][0]
    assert bridge["type"] == "bridge" and bridge["hairpinMode"] and not bridge["ipMasq"]
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.244.3.0/24"}]]
    assert json.loads(json.dumps(conf)) == conf


def test_a_claim_gets_a_local_volume_pinned_to_its_node() -> None:
    pvc = {"metadata": {"namespace": "ns", "name": "data-demo-broker-0", "uid": "u-1"},
           "spec": {"resources": {"requests": {"storage": "1Gi"}}, "storageClassName": "standard"}}
    pv = volume_for(pvc, "w1", Path("/var/local-path-provisioner"))
    assert pv["spec"]["local"]["path"] == "/var/local-path-provisioner/pvc-u-1"
    assert pv["metadata"]["labels"][NODE_LABEL] == "w1"
    terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["w1"]}]}]
    assert pv["spec"]["claimRef"]["uid"] == "u-1" and pv["spec"]["capacity"]["storage"] == "1Gi"


def test_quantities_compare_as_kubernetes_writes_them() -> None:
    assert quantity("2Gi") == quantity("2048Mi") == 2 * 2**30
    assert quantity("1500M") == 1_500_000_000 and quantity("1e9") == 10**9 and quantity("0.5Ti") == 2**39
    assert quantity("100m") * 10 == 1 and quantity("7") == 7
    for bad in ("", "Gi", "2Xi", "two"):
        with pytest.raises(ValueError):
            quantity(bad)


def claim(requested: str, conditions: list[dict] | None = None) -> dict:
    return {"metadata": {"namespace": "ns", "name": "data-demo-broker-0", "uid": "u-1"},
            "spec": {"resources": {"requests": {"storage": requested}}, "volumeName": "pvc-u-1"},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}, "conditions": conditions or []}}


def test_a_volume_grows_only_when_its_claim_asks_for_more() -> None:
    pv = volume_for(claim("1Gi"), "w1", Path("/v"))
    assert growth(claim("1Gi"), pv) is None
    assert growth(claim("1024Mi"), pv) is None  # the same size written otherwise
    assert growth(claim("2Gi"), pv) == "2Gi"
    assert growth(claim("512Mi"), pv) is None  # never smaller (the API server refuses it anyway)
    assert growth(claim("lots"), pv) is None and growth({"spec": {}}, pv) is None


def test_a_grown_claim_waits_for_the_kubelet_once() -> None:
    first = resize_pending(claim("2Gi", [{"type": "Resizing", "status": "True"}, {"type": "Other"}]), "T1")
    assert [c["type"] for c in first] == ["Other", FS_RESIZE_PENDING]
    assert first[-1]["lastTransitionTime"] == "T1" and first[-1]["status"] == "True"
    again = resize_pending(claim("3Gi", first), "T2")  # grown again before the kubelet got to it
    assert again[-1]["lastTransitionTime"] == "T1" and len(again) == 2


def test_the_class_says_whether_a_file_system_grows_online_or_at_the_next_mount() -> None:
    default, offline = storage_classes()
    assert default["allowVolumeExpansion"] and offline["allowVolumeExpansion"]
    assert expansion_mode(default) == "online" and expansion_mode(offline) == "offline"
    assert expansion_mode(None) == "online" and expansion_mode({"parameters": {"dm.dev/expansion": "x"}}) == "online"
    done = resize_done(claim("2Gi", [{"type": FS_RESIZE_PENDING}, {"type": "Other"}]), "2Gi")
    assert done == {"capacity": {"storage": "2Gi"}, "conditions": [{"type": "Other"}]}


def pod(created: str, claim_name: str = "data-demo-broker-0", phase: str = "Running", **meta: str) -> dict:
    return {"metadata": {"namespace": "ns", "name": "demo-broker-0", "creationTimestamp": created, **meta},
            "spec": {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]},
            "status": {"phase": phase}}


def test_an_offline_file_system_grows_when_a_pod_created_since_runs_with_it() -> None:
    pending = claim("2Gi", resize_pending(claim("2Gi"), "2026-11-29T10:00:05Z"))
    assert not mounts_grown(pod("2026-11-29T10:00:04Z"), pending)  # mounted before: waits for a restart
    assert mounts_grown(pod("2026-11-29T10:00:05Z"), pending)  # the same second: as the operator counts it
    assert mounts_grown(pod("2026-11-29T10:01:00Z"), pending)
    assert not mounts_grown(pod("2026-11-29T10:01:00Z", phase="Pending"), pending)
    assert not mounts_grown(pod("2026-11-29T10:01:00Z", claim_name="other"), pending)
    assert not mounts_grown(pod("2026-11-29T10:01:00Z", deletionTimestamp="x"), pending)
    assert not mounts_grown(pod("2026-11-29T10:01:00Z"), claim("2Gi"))  # nothing waits
