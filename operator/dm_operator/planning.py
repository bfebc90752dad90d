"""Pure decisions of the operator: which broker to restart next (if any, and why not), which
partitions to move off brokers a scale-down removes and onto brokers a scale-up adds, what a
Topic's spec asks of the controller. No I/O: everything they need comes in as arguments, so they
are tested on their own."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dm_broker.config import ConfigError, validate_topic_configs
from dm_broker.controller.models import TopicDoc
from dm_broker.controller.rebalance import Move, PlanError, Racks, plan


@dataclass(frozen=True)
class BrokerPod:
    id: int
    ready: bool
    revision: str | None  # the pod's dm.dev/revision annotation
    deleting: bool = False
    restart_for: str | None = None  # a restart it needs at the current revision (its volume's file system grows)


@dataclass(frozen=True)
class RollStep:
    """`restart` names the broker whose pod to delete now; otherwise `wait` says why not (or the
    roll is done: both None)."""

    restart: int | None = None
    wait: str | None = None
    outdated: list[int] = field(default_factory=list)


def hosted(topics: dict[str, TopicDoc], broker: int) -> list[tuple[str, int]]:
    return [(name, i) for name, doc in topics.items() for i, p in enumerate(doc.partitions) if broker in p.replicas]


def min_isr(doc: TopicDoc, default: int) -> int:
    try:
        return int(doc.configs.get("min.insync.replicas", default))
    except ValueError:
        return default


def restart_blocker(topics: dict[str, TopicDoc], broker: int, default_min_isr: int) -> str | None:
    """Why restarting `broker` now would stop acks=all writes somewhere, or None. Partitions with
    one replica cannot do better and do not block (their brief unavailability is documented)."""
    for name, doc in topics.items():
        need = min_isr(doc, default_min_isr)
        for i, p in enumerate(doc.partitions):
            if broker not in p.isr or len(p.replicas) == 1:
                continue
            if len(p.isr) - 1 < need:
                return (f"restarting broker {broker} would take {name}-{i} below min.insync.replicas={need} "
                        f"(ISR {p.isr})")
    return None


def catching_up(topics: dict[str, TopicDoc], broker: int) -> str | None:
    for name, doc in topics.items():
        for i, p in enumerate(doc.partitions):
            if broker in p.replicas and broker not in p.isr:
                return f"broker {broker} is not back in the ISR of {name}-{i} yet"
    return None


def next_roll_step(target: str, pods: list[BrokerPod], expected: int, topics: dict[str, TopicDoc],
                   default_min_isr: int) -> RollStep:
    """One broker at a time: only when every broker pod exists, is Ready and is back in every ISR it
    belongs to, and only a broker whose restart keeps every partition at min.insync.replicas."""
    outdated = sorted(p.id for p in pods if (p.revision != target or p.restart_for) and not p.deleting)
    if not outdated:
        return RollStep()
    by_id = {p.id: p for p in pods}
    for broker_id in range(expected):
        pod = by_id.get(broker_id)
        if pod is None or pod.deleting:
            return RollStep(wait=f"broker {broker_id}'s pod is being replaced", outdated=outdated)
        if not pod.ready:
            # An outdated pod that is not Ready is restarted first: it is not serving anyway.
            if broker_id in outdated:
                return RollStep(restart=broker_id, outdated=outdated)
            return RollStep(wait=f"broker {broker_id} is not Ready yet", outdated=outdated)
    for broker_id in range(expected):
        lagging = catching_up(topics, broker_id)
        if lagging:
            return RollStep(wait=lagging, outdated=outdated)
    reasons = []
    for broker_id in outdated:
        blocker = restart_blocker(topics, broker_id, default_min_isr)
        if blocker is None:
            return RollStep(restart=broker_id, outdated=outdated)
        reasons.append(blocker)
    return RollStep(wait=reasons[0], outdated=outdated)


def scale_down_blocker(topics: dict[str, TopicDoc], current: int, desired: int) -> str | None:
    """Brokers with ids >= desired go away; they must hold no replica first."""
    holding = {b: hosted(topics, b) for b in range(desired, current)}
    busy = {b: parts for b, parts in holding.items() if parts}
    if not busy:
        return None
    detail = "; ".join(f"broker {b} holds {len(parts)} replicas ({', '.join(f'{t}-{p}' for t, p in parts[:3])}"
                       f"{', ...' if len(parts) > 3 else ''})" for b, parts in sorted(busy.items()))
    return f"brokers {sorted(busy)} still hold replicas: {detail}"


def assignment(topics: dict[str, TopicDoc]) -> dict[tuple[str, int], list[int]]:
    return {(name, i): list(p.replicas) for name, doc in topics.items() for i, p in enumerate(doc.partitions)}


def reassigning(topics: dict[str, TopicDoc]) -> list[tuple[str, int]]:
    return [(name, i) for name, doc in topics.items() for i, p in enumerate(doc.partitions) if p.reassigning]


def drain_moves(topics: dict[str, TopicDoc], racks: dict[int, str | None], desired: int) -> list[Move]:
    """The reassignments that empty the brokers a scale-down to `desired` removes (ids >= desired)
    and keep the rest balanced. `racks` lists the serving brokers. PlanError when the brokers left
    cannot hold a topic's replicas, or one of them is not serving: the planner would move its
    replicas too, and it is most likely only restarting."""
    down = [b for b in range(desired) if b not in racks]
    if down:
        raise PlanError(f"broker {', '.join(map(str, down))} is not serving; the drain waits until it is back")
    return plan(assignment(topics), racks, exclude={b for b in racks if b >= desired})


def scale_up_moves(topics: dict[str, TopicDoc], racks: dict[int, str | None]) -> list[Move]:
    """The reassignments that spread existing partitions onto brokers a scale-up added."""
    return plan(assignment(topics), racks)


# -- topics ---------------------------------------------------------------------------------------


class TopicRefusal(Exception):
    """The spec asks for something the controller will not do; `reason` is the condition's."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def topic_configs(raw: dict[str, Any]) -> dict[str, str]:
    """spec.config as the controller takes it: strings, validated (TopicRefusal otherwise)."""
    out = {}
    for key, value in raw.items():
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, (int, float, str)):
            out[key] = str(value)
        else:
            raise TopicRefusal("InvalidConfig", f"config {key}: expected a string, number or boolean")
    try:
        return validate_topic_configs(out)
    except ConfigError as exc:
        raise TopicRefusal("InvalidConfig", str(exc)) from None


@dataclass(frozen=True)
class TopicPlan:
    create: bool = False
    add_partitions_to: int | None = None
    configs: dict[str, str] | None = None  # the whole new override set, when it differs
    reassign: dict[int, list[int]] | None = None  # partition -> new replicas (a replication factor change)


def plan_topic(partitions: int, replicas: int, configs: dict[str, str], current: TopicDoc | None,
               racks: dict[int, str | None] | None = None) -> TopicPlan:
    """What to ask of the controller so the topic matches the spec (TopicRefusal for what it must not).
    `racks` (live broker id -> rack) places the replicas a replication factor increase adds."""
    if current is None:
        return TopicPlan(create=True)
    have = len(current.partitions)
    if partitions < have:
        raise TopicRefusal("PartitionDecreaseNotSupported",
                           f"the topic has {have} partitions; a topic's partition count can only grow "
                           f"(spec asks for {partitions})")
    rf = len(current.partitions[0].target_replicas) if current.partitions else replicas
    reassign = None
    if replicas != rf:
        brokers = racks or {}
        if replicas > len(brokers):
            raise TopicRefusal("NotEnoughBrokers", f"replication factor {replicas} needs {replicas} brokers; "
                                                   f"{len(brokers)} are registered")
        reassign = replica_change(current, replicas, brokers)
    return TopicPlan(add_partitions_to=partitions if partitions > have else None,
                     configs=configs if configs != current.configs else None, reassign=reassign)


def replica_change(doc: TopicDoc, replicas: int, racks: dict[int, str | None]) -> dict[int, list[int]]:
    """New replica lists for a replication factor change: replicas are added on the brokers holding
    fewest of the topic's replicas (other racks first) and removed from the end of the list, never
    the leader; partitions already being reassigned are left alone."""
    domains = Racks(racks)
    load = {b: 0 for b in racks}
    for p in doc.partitions:
        for r in p.target_replicas:
            if r in load:
                load[r] += 1
    out: dict[int, list[int]] = {}
    for i, p in enumerate(doc.partitions):
        if p.reassigning:
            continue
        target = list(p.replicas)
        while len(target) > replicas:
            drop = next(r for r in reversed(target) if r != p.leader)
            target.remove(drop)
            load[drop] = load.get(drop, 1) - 1
        while len(target) < replicas:
            best = domains.new_replica([b for b in racks if b not in target], target, load)
            target.append(best)
            load[best] += 1
        if target != p.replicas:
            out[i] = target
    return out
