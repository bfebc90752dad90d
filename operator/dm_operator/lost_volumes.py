"""Brokers whose volume is on a node that is gone (pure logic; `volume_replacement` does the I/O).

A volume pinned to one node (local PersistentVolumes and other node-local storage) cannot follow its
broker anywhere else: once that node's Node object is deleted, the broker's new pod is Pending for ever.
A new, empty volume brings the broker back, and it catches up from the other replicas (ADR 0047). That
gives up the old volume's data, so it happens only on a decision: the claim annotated
`dm.dev/replace-volume=true`, or `spec.storage.lostNode.replaceVolume` once the pod has waited
`afterSeconds` (ADR 0054).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from .conditions import condition
from .objects import Obj, annotations_of, being_deleted

REPLACE_ANNOTATION = "dm.dev/replace-volume"
LOST_NODE_ANNOTATION = "dm.dev/lost-node"
REPLACED_CLAIM_ANNOTATION = "dm.dev/replaced-claim"
HOSTNAME = "kubernetes.io/hostname"
CLAIMLESS_GRACE_S = 10.0  # a pod younger than this may just be ahead of its claim in the operator's cache


@dataclass(frozen=True)
class Stranded:
    """A broker whose pod cannot be scheduled because its volume is pinned to a node that is gone."""
    broker: int
    claim: str
    claim_uid: str
    pod_uid: str
    volume: str
    node: str
    waiting_since: str  # the pod's creationTimestamp
    approved: bool  # the claim carries dm.dev/replace-volume=true


def unscheduled(pod: Obj) -> bool:
    return not (pod.get("spec") or {}).get("nodeName") and not being_deleted(pod)


def seconds_since(timestamp: str, now: datetime.datetime) -> float:
    try:
        then = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return (now - then).total_seconds()


def pinned_node(pv: Obj) -> str | None:
    """The one node a volume's required node affinity allows by name, or None: every term must name
    hosts (`kubernetes.io/hostname In [...]`) and together they must name exactly one."""
    terms = (((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms")
    hosts: set[str] = set()
    for term in terms or []:
        named = [e for e in term.get("matchExpressions") or []
                 if e.get("key") == HOSTNAME and e.get("operator") == "In"]
        if not named:
            return None  # this term allows nodes by other labels: the volume may be reachable elsewhere
        hosts.update(*(e.get("values") or [] for e in named))
    return next(iter(hosts)) if len(hosts) == 1 else None


def candidates(pods: dict[int, Obj], claims: dict[int, Obj]) -> list[tuple[int, Obj, Obj]]:
    """Brokers whose pod waits unscheduled while its claim is bound: (broker, pod, claim). Only these are
    worth an API call to see whether their volume's node is gone."""
    out = []
    for broker, pod in sorted(pods.items()):
        claim = claims.get(broker)
        if claim is None or being_deleted(claim) or not unscheduled(pod):
            continue
        if (claim.get("spec") or {}).get("volumeName") and (claim.get("status") or {}).get("phase") == "Bound":
            out.append((broker, pod, claim))
    return out


def stranded(broker: int, pod: Obj, claim: Obj, pv: Obj | None, node_exists: bool | None) -> Stranded | None:
    """The broker as Stranded if its volume is pinned to a node that does not exist (node_exists False;
    None when its volume is pinned to no single node and nothing was asked)."""
    if pv is None or node_exists is not False:
        return None
    node = pinned_node(pv)
    if node is None:
        return None
    return Stranded(broker=broker, claim=claim["metadata"]["name"], claim_uid=claim["metadata"].get("uid", ""),
                    pod_uid=pod["metadata"].get("uid", ""), volume=pv["metadata"]["name"], node=node,
                    waiting_since=pod["metadata"].get("creationTimestamp", ""),
                    approved=annotations_of(claim).get(REPLACE_ANNOTATION, "").lower() == "true")


def due(found: list[Stranded], policy_on: bool, after_s: int, now: datetime.datetime) -> Stranded | None:
    """The one broker whose volume is replaced in this pass: approved on its claim, or by the policy once
    its pod has waited `after_s`. One a pass, so each step is seen before the next."""
    for s in sorted(found, key=lambda s: s.broker):
        if s.approved or (policy_on and seconds_since(s.waiting_since, now) >= after_s):
            return s
    return None


def claimless(pods: dict[int, Obj], claims: dict[int, Obj], now: datetime.datetime) -> list[int]:
    """Brokers whose unscheduled pod has no claim left (gone or terminating) and is older than the cache's
    grace: such a pod cannot start, and the StatefulSet makes a claim only with a new pod."""
    out = []
    for broker, pod in sorted(pods.items()):
        claim = claims.get(broker)
        if (claim is None or being_deleted(claim)) and unscheduled(pod) and \
                seconds_since(pod["metadata"].get("creationTimestamp", ""), now) >= CLAIMLESS_GRACE_S:
            out.append(broker)
    return out


def lost_volumes_condition(found: list[Stranded], policy_on: bool, after_s: int, namespace: str) -> Obj:
    """The DMCluster's `VolumesOnLostNodes` condition."""
    if not found:
        return condition("VolumesOnLostNodes", False, "None", "every broker's volume is on an existing node")
    described = "; ".join(f"broker {s.broker}'s volume {s.volume} is on node {s.node}, which is gone"
                          for s in found)
    if policy_on:
        return condition("VolumesOnLostNodes", True, "Replacing",
                         f"{described}: each gets a new, empty volume once its pod has waited {after_s} s "
                         "(spec.storage.lostNode); the old volume is kept (reclaimPolicy Retain)"[:1000])
    first = found[0]
    return condition("VolumesOnLostNodes", True, "DecisionNeeded",
                     f"{described}; its pod cannot start. To give it a new, empty volume (it catches up from "
                     f"the other replicas; the old volume is kept): kubectl annotate pvc {first.claim} -n "
                     f"{namespace} {REPLACE_ANNOTATION}=true, or set spec.storage.lostNode.replaceVolume"[:1000])
