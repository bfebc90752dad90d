"""A node that leaves the cluster for good, under load (ADR 0054): a worker's container stopped and its
Node object deleted, as a cloud provider does for a terminated machine. The broker whose node-local volume
was on it cannot be scheduled anywhere; with `spec.storage.lostNode.replaceVolume` the operator gives it a
new, empty volume on another node, the broker catches up from the other replicas, and no acknowledged
record is lost. The old volume is kept (reclaimPolicy Retain, annotated with the node and the claim). The
worker is started again afterwards and rejoins the cluster as a new node."""

from __future__ import annotations

import time

import pytest
from dm import (
    broker_pods,
    condition,
    create_cluster,
    fully_in_sync,
    leading_operator_nodes,
    start_load,
    topic_status,
    verdict,
)
from measurements import note
from support import get_json, get_or_none, pod_ready, wait_until

pytestmark = [pytest.mark.timeout(900), pytest.mark.e2e_exclusive]  # it stops a node and deletes it


def node_ready(sub, name: str) -> bool:
    node = get_or_none(sub, "node", name)
    return node is not None and any(c["type"] == "Ready" and c["status"] == "True"
                                    for c in node["status"].get("conditions", []))


def pod_network_configured(sub, name: str) -> bool:
    """The node's CNI config names its pod CIDR as the control plane has it now (a new one after the
    Node object was deleted)."""
    cidr = get_json(sub, "node", name)["spec"].get("podCIDR")
    conf = sub.docker("exec", name, "cat", "/etc/cni/net.d/10-dm-kind-bridge.conflist", check=False)
    return bool(cidr) and conf.returncode == 0 and cidr in conf.stdout


def test_a_broker_whose_node_is_gone_comes_back_on_a_new_volume(e2e_namespace, operator):
    sub, ns = operator, e2e_namespace
    create_cluster(sub, ns, storage={"size": "1Gi", "lostNode": {"replaceVolume": True, "afterSeconds": 0}})
    load = start_load(sub, ns)

    # A worker that runs a broker but not the leading operator (tests/e2e/test_operator_ha.py loses that one);
    # the clients run on the control plane's node.
    operator_nodes = leading_operator_nodes(sub)
    victim = next(p for p in broker_pods(sub, ns) if p["spec"]["nodeName"] not in operator_nodes)
    node, pod = victim["spec"]["nodeName"], victim["metadata"]["name"]
    claim = f"data-{pod}"
    old = get_json(sub, "pvc", claim, "-n", ns)
    volume = old["spec"]["volumeName"]

    lost_at = time.time()
    sub.chaos.stop_node(node)
    try:
        sub.kubectl("delete", "node", node)
        # The pod GC deletes the pods of a node that is gone within a minute; an administrator who deletes
        # the node does not wait for it, nor does this test.
        sub.kubectl("delete", "pod", pod, "-n", ns, "--grace-period=0", "--force", "--wait=false")

        def back_elsewhere() -> bool:
            new = get_or_none(sub, "pvc", claim, "-n", ns)
            again = get_or_none(sub, "pod", pod, "-n", ns)
            return bool(new and new["metadata"]["uid"] != old["metadata"]["uid"] and again and pod_ready(again)
                        and again["spec"].get("nodeName") not in (None, node))

        wait_until(back_elsewhere, 300, f"{pod} Ready on a new volume on another node")
        back_after = time.time() - lost_at
        wait_until(lambda: fully_in_sync(topic_status(sub, ns, "load")), 240, "the new broker back in every ISR")
        in_sync_after = time.time() - lost_at
        kept = get_json(sub, "pv", volume)
        assert kept["spec"]["persistentVolumeReclaimPolicy"] == "Retain", kept["spec"]
        assert kept["metadata"]["annotations"]["dm.dev/lost-node"] == node
        assert kept["metadata"]["annotations"]["dm.dev/replaced-claim"] == f"{ns}/{claim}"
        wait_until(lambda: (c := get_or_none(sub, "dmcluster", "demo", "-n", ns))["status"].get("readyReplicas") == 3
                   and condition(c, "VolumesOnLostNodes").get("reason") == "None", 60,
                   "three ready brokers and the VolumesOnLostNodes condition clear")
        events = sub.kubectl("get", "events", "-n", ns, "--field-selector", "involvedObject.kind=DMCluster",
                             "-o", "jsonpath={.items[*].reason}").stdout.split()
        assert events.count("VolumeReplaced") == 1, events
    finally:
        sub.chaos.start_node(node)
        wait_until(lambda: node_ready(sub, node) and pod_network_configured(sub, node), 240,
                   f"{node} back in the cluster with its pod network")

    time.sleep(3)  # load after the broker is back
    result = verdict(load.producer.stop(), load.consumer.stop())
    note(f"[{sub.name}] node {node} gone with broker {pod}'s volume: back on a new volume after {back_after:.0f} s, "
         f"in every ISR after {in_sync_after:.0f} s; {result.summary()}")
    assert result.acked > 500 and result.ok, result.summary()
    sub.kubectl("delete", "pv", volume, "--wait=false")  # the kept volume: deleting it is a decision, this test's
