"""Which brokers are stranded by a node that is gone, when their volume is replaced, and what the
DMCluster's VolumesOnLostNodes condition says (dm_operator/lost_volumes.py, ADR 0054)."""

from __future__ import annotations

import datetime

from dm_operator import lost_volumes
from dm_operator.lost_volumes import Stranded

NOW = datetime.datetime(2026, 11, 29, 12, 0, 0, tzinfo=datetime.UTC)


def pod(node: str | None = None, created: str = "2026-11-29T11:50:00Z", deleting: bool = False) -> dict:
    meta = {"name": "demo-broker-2", "uid": "pod-uid", "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T11:59:00Z"
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}, "status": {"phase": "Pending"}}


def claim(volume: str | None = "pv-2", phase: str = "Bound", annotations: dict | None = None,
          deleting: bool = False) -> dict:
    meta = {"name": "data-demo-broker-2", "uid": "claim-uid", "annotations": annotations or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T11:59:00Z"
    return {"metadata": meta, "spec": {"volumeName": volume} if volume else {}, "status": {"phase": phase}}


def pinned(*terms: list[tuple[str, str, list[str]]]) -> dict:
    return {"metadata": {"name": "pv-2"}, "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": k, "operator": op, "values": v} for k, op, v in term]} for term in terms]}}}}


HOST = "kubernetes.io/hostname"


def test_a_volume_is_pinned_only_when_its_affinity_names_one_host():
    assert lost_volumes.pinned_node(pinned([(HOST, "In", ["w3"])])) == "w3"
    assert lost_volumes.pinned_node(pinned([(HOST, "In", ["w3"])], [(HOST, "In", ["w3"])])) == "w3"
    assert lost_volumes.pinned_node(pinned([(HOST, "In", ["w2", "w3"])])) is None  # either will do
    assert lost_volumes.pinned_node(pinned([(HOST, "In", ["w3"])], [("zone", "In", ["a"])])) is None
    assert lost_volumes.pinned_node(pinned([("topology.kubernetes.io/zone", "In", ["a"])])) is None
    assert lost_volumes.pinned_node(pinned([(HOST, "NotIn", ["w3"])])) is None
    assert lost_volumes.pinned_node({"metadata": {"name": "nfs"}, "spec": {}}) is None


def test_only_an_unscheduled_pod_with_a_bound_claim_is_looked_into():
    assert lost_volumes.candidates({2: pod()}, {2: claim()}) == [(2, pod(), claim())]
    assert lost_volumes.candidates({2: pod(node="w1")}, {2: claim()}) == []  # scheduled: it runs or will
    assert lost_volumes.candidates({2: pod(deleting=True)}, {2: claim()}) == []
    assert lost_volumes.candidates({2: pod()}, {2: claim(volume=None, phase="Pending")}) == []  # not bound yet
    assert lost_volumes.candidates({2: pod()}, {2: claim(deleting=True)}) == []
    assert lost_volumes.candidates({2: pod()}, {}) == []


def test_a_broker_is_stranded_only_when_its_volumes_node_does_not_exist():
    pv = pinned([(HOST, "In", ["w3"])])
    found = lost_volumes.stranded(2, pod(), claim(), pv, node_exists=False)
    assert found == Stranded(broker=2, claim="data-demo-broker-2", claim_uid="claim-uid", pod_uid="pod-uid",
                             volume="pv-2", node="w3", waiting_since="2026-11-29T11:50:00Z", approved=False)
    assert lost_volumes.stranded(2, pod(), claim(), pv, node_exists=True) is None  # NotReady nodes come back
    assert lost_volumes.stranded(2, pod(), claim(), None, node_exists=False) is None
    assert lost_volumes.stranded(2, pod(), claim(), pinned([("zone", "In", ["a"])]), node_exists=None) is None
    approved = lost_volumes.stranded(2, pod(), claim(annotations={"dm.dev/replace-volume": "true"}), pv, False)
    assert approved is not None and approved.approved


def stranded(broker: int, waited_s: float, approved: bool = False) -> Stranded:
    since = (NOW - datetime.timedelta(seconds=waited_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Stranded(broker, f"data-demo-broker-{broker}", "c", "p", f"pv-{broker}", "w3", since, approved)


def test_a_volume_is_replaced_only_on_a_decision_and_one_at_a_time():
    assert lost_volumes.due([stranded(2, 3600)], policy_on=False, after_s=300, now=NOW) is None
    assert lost_volumes.due([stranded(2, 10, approved=True)], policy_on=False, after_s=300, now=NOW).broker == 2
    assert lost_volumes.due([stranded(2, 299)], policy_on=True, after_s=300, now=NOW) is None
    assert lost_volumes.due([stranded(2, 300)], policy_on=True, after_s=300, now=NOW).broker == 2
    both = [stranded(4, 900), stranded(1, 900)]
    assert lost_volumes.due(both, policy_on=True, after_s=0, now=NOW).broker == 1


def test_a_pod_left_without_its_claim_is_made_again_after_a_grace():
    assert lost_volumes.claimless({2: pod()}, {}, NOW) == [2]
    assert lost_volumes.claimless({2: pod()}, {2: claim(deleting=True)}, NOW) == [2]
    assert lost_volumes.claimless({2: pod()}, {2: claim()}, NOW) == []
    assert lost_volumes.claimless({2: pod(node="w1")}, {}, NOW) == []  # scheduled: not ours to judge
    assert lost_volumes.claimless({2: pod(created="2026-11-29T11:59:55Z")}, {}, NOW) == []  # may be cache lag


def test_the_condition_says_what_decides():
    none = lost_volumes.lost_volumes_condition([], policy_on=False, after_s=300, namespace="ns")
    assert (none["status"], none["reason"]) == ("False", "None")
    waiting = lost_volumes.lost_volumes_condition([stranded(2, 60)], policy_on=False, after_s=300, namespace="ns")
    assert (waiting["status"], waiting["reason"]) == ("True", "DecisionNeeded")
    assert "kubectl annotate pvc data-demo-broker-2 -n ns dm.dev/replace-volume=true" in waiting["message"]
    assert "broker 2's volume pv-2 is on node w3, which is gone" in waiting["message"]
    replacing = lost_volumes.lost_volumes_condition([stranded(2, 60)], policy_on=True, after_s=300, namespace="ns")
    assert replacing["reason"] == "Replacing" and "300 s" in replacing["message"]
