"""Moving partitions when a DMCluster's size changes: the replicas of brokers a scale-down removes are
moved off them first (the brokers stay until they hold none), and once a grown cluster's brokers are
all up, existing partitions are spread onto the new ones. Every move the operator starts runs under
the replication throttle of `spec.rebalance.throttle` (as `dm cluster rebalance --throttle` does), set
as the cluster-wide default rates before the moves and removed once nothing moves any more; the
status shows how many partitions and bytes are still to copy."""

from __future__ import annotations

import logging

from dm_broker.controller.controller import Controller, ControllerError
from dm_broker.controller.models import BrokerConfigsRequest, ReassignmentRequest
from dm_broker.controller.rebalance import Move, PlanError

from .conditions import condition
from .events import EventRecorder
from .objects import Obj
from .planning import drain_moves, reassigning, scale_up_moves

log = logging.getLogger(__name__)
THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


class Mover:
    def __init__(self, controller: Controller, recorder: EventRecorder, cluster: str,
                 throttle_set: int | None = None, balanced: int | None = None) -> None:
        self.controller = controller
        self.recorder = recorder
        self.cluster = cluster
        self.throttle_set = throttle_set  # the rate the operator set (status.rebalance.throttle), to remove
        self.balanced = balanced  # the cluster size partitions were last spread over (status.balancedBrokers)

    def live_racks(self) -> dict[int, str | None]:
        return {b.node_id: b.rack for b in self.controller.brokers.values() if not b.fenced}

    # -- the throttle ---------------------------------------------------------------------------------

    def _defaults(self) -> dict[str, str]:
        return self.controller.cluster.broker_configs.get("", {})

    async def throttle(self, rate: int) -> None:
        """Before the operator moves anything: the replication of moving replicas is capped at `rate`
        bytes/s per broker (0: not throttled). A rate someone else set is left alone."""
        if rate <= 0:
            return
        defaults = self._defaults()
        if any(name in defaults for name in THROTTLE_RATES) and self.throttle_set is None:
            return  # set by someone else (dm cluster rebalance --throttle, kafka-configs): theirs to manage
        if all(defaults.get(name) == str(rate) for name in THROTTLE_RATES):
            self.throttle_set = rate
            return
        await self.controller.alter_broker_configs(BrokerConfigsRequest(
            broker="", configs={name: str(rate) for name in THROTTLE_RATES}))
        self.throttle_set = rate
        log.info("%s: replication throttled to %d bytes/s for the operator's moves", self.cluster, rate)

    async def settle(self) -> None:
        """Once nothing moves: the throttle the operator set goes (if it is still the operator's)."""
        if self.throttle_set is None or reassigning(self.controller.topics):
            return
        defaults = self._defaults()
        ours = {name: None for name in THROTTLE_RATES if defaults.get(name) == str(self.throttle_set)}
        if ours:
            try:
                await self.controller.alter_broker_configs(BrokerConfigsRequest(broker="", configs=ours))
            except ControllerError as exc:
                log.warning("%s: cannot remove the replication throttle: %s", self.cluster, exc.message)
                return
            self.recorder.record("ThrottleRemoved", "partitions moved: replication throttle removed")
        self.throttle_set = None

    # -- the moves ----------------------------------------------------------------------------------------

    async def reassign(self, moves: list[Move], why: str, rate: int) -> None:
        if not moves:
            return
        await self.throttle(rate)
        results = await self.controller.alter_reassignments(
            [ReassignmentRequest(topic=m.topic, partition=m.partition, replicas=list(m.after)) for m in moves])
        failed = [r for r in results if r.error]
        for r in failed:
            log.warning("%s: reassignment of %s-%d refused: %s", self.cluster, r.topic, r.partition, r.message)
        throttled = f", throttled at {rate} bytes/s" if rate > 0 else ""
        self.recorder.record("PartitionsMoving", f"{why}: moving {len(moves) - len(failed)} partitions "
                                                 f"({sum(m.copies for m in moves)} replica copies{throttled})")

    async def drain(self, desired: int, rate: int) -> tuple[str, str]:
        """Moves the replicas off the brokers a scale-down removes; (reason, message) of the
        ScaleDownBlocked condition while they still hold some."""
        moving = reassigning(self.controller.topics)
        if moving:
            return "DrainingBrokers", f"moving {len(moving)} partitions before brokers {desired} and above are removed"
        try:
            moves = drain_moves(self.controller.topics, self.live_racks(), desired)
        except PlanError as exc:
            return "BrokersHoldReplicas", f"cannot move the replicas off brokers {desired} and above: {exc}"
        await self.reassign(moves, f"scale-down to {desired} brokers", rate)
        return "DrainingBrokers", f"moving {len(moves)} partitions before brokers {desired} and above are removed"

    async def rebalance_after_scale_up(self, replicas: int, rate: int) -> Obj:
        """Once every broker of a grown cluster is registered, existing partitions are spread onto
        the new ones (once per size: status.balancedBrokers remembers it across operator restarts)."""
        racks = self.live_racks()
        all_up = all(b in racks for b in range(replicas))
        moving = reassigning(self.controller.topics)
        if moving:
            return condition("Rebalancing", True, "PartitionsMoving", f"{len(moving)} partitions are being moved")
        if all_up and self.balanced is None:
            self.balanced = replicas  # a new cluster (or operator): its placement is the baseline
        elif all_up and self.balanced < replicas:
            moves = scale_up_moves(self.controller.topics, {b: r for b, r in racks.items() if b < replicas})
            await self.reassign(moves, f"scale-up to {replicas} brokers", rate)
            self.balanced = replicas
            if moves:
                return condition("Rebalancing", True, "PartitionsMoving",
                                 f"spreading {len(moves)} partitions onto the new brokers")
        elif all_up:
            self.balanced = min(self.balanced, replicas)
        return condition("Rebalancing", False, "Balanced", "no partition is being moved")

    def progress(self) -> Obj:
        """status.rebalance: what is still moving, and how many bytes the new replicas still lack (as
        their leaders last reported them)."""
        moving = reassigning(self.controller.topics)
        lag = self.controller.reassignment_lag
        return {"throttle": self.throttle_set, "partitionsMoving": len(moving),
                "bytesLeft": sum(lag.get(key, 0) for key in moving)}
