"""The admin calls librdkafka lacks (partition reassignments, leader elections, dynamic broker
configs), spoken directly in the Kafka protocol with dm's own client, so the CLI needs no other
Kafka library. Any broker answers them: it forwards to the controller."""

from __future__ import annotations

import asyncio
import datetime
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from ..protocol.build import make, nested
from ..protocol.client import KafkaConnection
from ..protocol.codec import request_class
from .client import wire_security

TIMEOUT = datetime.timedelta(seconds=30)
BROKER_RESOURCE = 4
OP_SET, OP_DELETE = 0, 1
THROTTLE_CONFIGS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")

Key = tuple[str, int]


class AdminError(Exception):
    pass


@dataclass
class ClusterView:
    brokers: dict[int, str | None]  # id -> rack, as Metadata lists them (also those just fenced)
    replicas: dict[Key, list[int]]
    leaders: dict[Key, int]
    isr: dict[Key, list[int]] = field(default_factory=dict)
    serving: set[int] = field(default_factory=set)  # unfenced brokers, as DescribeCluster lists them

    def known(self) -> set[int]:
        """Every broker the cluster mentions: listed, or holding a replica (a broker down for a while
        is no longer listed but still holds its replicas)."""
        return set(self.brokers) | {b for replicas in self.replicas.values() for b in replicas}


@dataclass
class Ongoing:
    replicas: list[int]
    adding: list[int]
    removing: list[int]


class WireAdmin:
    def __init__(self, conn: KafkaConnection) -> None:
        self.conn = conn

    @classmethod
    async def connect(cls, bootstrap: str) -> WireAdmin:
        errors = []
        for address in bootstrap.split(","):
            host, _, port = address.strip().rpartition(":")
            try:
                return cls(await KafkaConnection.open(host or "127.0.0.1", int(port), client_id="dm-cli",
                                                      security=wire_security()))
            except (OSError, TimeoutError, ValueError) as exc:
                errors.append(f"{address}: {exc or type(exc).__name__}")
        raise AdminError(f"cannot reach any broker ({'; '.join(errors)})")

    async def close(self) -> None:
        await self.conn.close()

    async def _call(self, api_key: int, version: int, **values: Any) -> Any:
        return await self.conn.request(make(request_class(api_key, version), **values), timeout=60)

    async def cluster(self) -> ClusterView:
        resp = await self._call(3, 12, topics=None, allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False)
        view = ClusterView(brokers={b.node_id: b.rack for b in resp.brokers}, replicas={}, leaders={})
        for t in resp.topics:
            if t.error_code != ErrorCode.none:
                continue
            for p in t.partitions:
                key = (t.name, p.partition_index)
                view.replicas[key] = list(p.replica_nodes)
                view.leaders[key] = p.leader_id
                view.isr[key] = list(p.isr_nodes)
        described = await self._call(60, 0, include_cluster_authorized_operations=False)
        if described.error_code != ErrorCode.none:
            raise AdminError(f"DescribeCluster: {described.error_code.name}: {described.error_message or ''}")
        view.serving = {b.broker_id for b in described.brokers}
        return view

    async def alter_reassignments(self, targets: dict[Key, list[int] | None]) -> dict[Key, str | None]:
        """Starts (a list) or cancels (None) reassignments; partition -> error text or None."""
        cls = request_class(45, 0)
        topic_cls = nested(cls, "ReassignableTopic")
        part_cls = nested(cls, "ReassignablePartition")
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), replicas in sorted(targets.items()):
            by_topic.setdefault(topic, []).append(make(part_cls, partition_index=partition,
                                                       replicas=None if replicas is None else tuple(replicas)))
        resp = await self._call(45, 0, timeout=TIMEOUT, topics=tuple(
            make(topic_cls, name=t, partitions=tuple(ps)) for t, ps in by_topic.items()))
        if resp.error_code != ErrorCode.none:
            raise AdminError(f"{resp.error_code.name}: {resp.error_message or ''}")
        return {(t.name, p.partition_index): (None if p.error_code == ErrorCode.none
                                              else f"{p.error_code.name}: {p.error_message or ''}".rstrip(": "))
                for t in resp.responses for p in t.partitions}

    async def list_reassignments(self) -> dict[Key, Ongoing]:
        resp = await self._call(46, 0, timeout=TIMEOUT, topics=None)
        if resp.error_code != ErrorCode.none:
            raise AdminError(f"{resp.error_code.name}: {resp.error_message or ''}")
        return {(t.name, p.partition_index): Ongoing(list(p.replicas), list(p.adding_replicas),
                                                      list(p.removing_replicas))
                for t in resp.topics for p in t.partitions}

    async def elect_leaders(self, unclean: bool, partitions: list[Key] | None) -> dict[Key, str | None]:
        cls = request_class(43, 2)
        tp_cls = nested(cls, "TopicPartitions")
        wanted = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, p in partitions:
                by_topic.setdefault(topic, []).append(p)
            wanted = tuple(make(tp_cls, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items())
        resp = await self._call(43, 2, election_type=1 if unclean else 0, topic_partitions=wanted, timeout=TIMEOUT)
        if resp.error_code != ErrorCode.none:
            raise AdminError(resp.error_code.name)
        return {(r.topic, p.partition_id): (None if p.error_code == ErrorCode.none
                                            else f"{p.error_code.name}: {p.error_message or ''}".rstrip(": "))
                for r in resp.replica_election_results for p in r.partition_result}

    async def set_throttle(self, rate: int | None) -> None:
        """Both replication throttle rates on every broker (the cluster-wide default); None removes them."""
        cls = request_class(44, 1)
        res_cls = nested(cls, "AlterConfigsResource")
        cfg_cls = nested(cls, "AlterableConfig")
        configs = tuple(make(cfg_cls, name=name, config_operation=OP_DELETE if rate is None else OP_SET,
                             value=None if rate is None else str(rate)) for name in THROTTLE_CONFIGS)
        resp = await self._call(44, 1, resources=(make(res_cls, resource_type=BROKER_RESOURCE, resource_name="",
                                                       configs=configs),), validate_only=False)
        for r in resp.responses:
            if r.error_code != ErrorCode.none:
                raise AdminError(f"cannot set the replication throttle: {r.error_code.name}: {r.error_message}")

    async def describe_quotas(self, entity: list[tuple[str, str | None]], strict: bool
                              ) -> list[tuple[list[tuple[str, str | None]], dict[str, float]]]:
        """DescribeClientQuotas: entities matching `entity` (a name matches exactly, None the default)."""
        cls = request_class(48, 1)
        comp_cls = nested(cls, "ComponentData")
        components = tuple(make(comp_cls, entity_type=t, match_type=1 if n is None else 0, match=n)
                           for t, n in entity)
        resp = await self._call(48, 1, components=components, strict=strict)
        if resp.error_code != ErrorCode.none:
            raise AdminError(f"{resp.error_code.name}: {resp.error_message or ''}")
        return [([(e.entity_type, e.entity_name) for e in entry.entity], {v.key: v.value for v in entry.values})
                for entry in resp.entries or ()]

    async def alter_quotas(self, entity: list[tuple[str, str | None]], values: dict[str, float | None]) -> None:
        """AlterClientQuotas on one entity: a value sets a quota, None removes it."""
        cls = request_class(49, 1)
        entity_cls, op_cls, entry_cls = nested(cls, "EntityData"), nested(cls, "OpData"), nested(cls, "EntryData")
        entry = make(entry_cls, entity=tuple(make(entity_cls, entity_type=t, entity_name=n) for t, n in entity),
                     ops=tuple(make(op_cls, key=k, value=0.0 if v is None else float(v), remove=v is None)
                               for k, v in values.items()))
        resp = await self._call(49, 1, entries=(entry,), validate_only=False)
        for r in resp.entries:
            if r.error_code != ErrorCode.none:
                raise AdminError(f"{r.error_code.name}: {r.error_message or ''}")


def run(bootstrap: str, work: Any) -> Any:
    """Runs `await work(admin)` on a fresh connection."""

    async def main() -> Any:
        admin = await WireAdmin.connect(bootstrap)
        try:
            return await work(admin)
        finally:
            await admin.close()

    return asyncio.run(main())
