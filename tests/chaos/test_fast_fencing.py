"""A broker whose process dies is fenced through its controller session at once, not after the
session timeout; clients see its partitions move in one metadata step."""

from __future__ import annotations

from pathlib import Path

import pytest
from chaos_tools import create_topic, fully_replicated
from group_clients import wait_for
from harness import Cluster

pytestmark = pytest.mark.timeout(180)

# A session timeout no test waits for: only the session can move the leaders in time.
NEVER_TIMES_OUT = {"broker.session.timeout.ms": 600_000, "broker.heartbeat.interval.ms": 500}


def test_sigkilled_leader_is_fenced_through_its_session(tmp_path: Path):
    with Cluster(tmp_path, overrides=NEVER_TIMES_OUT) as cluster:
        create_topic(cluster, "t", 3)
        wait_for(lambda: fully_replicated(cluster, "t", 3), 30, what="the topic fully replicated")
        victim = cluster.leader("t", 0)
        cluster.brokers[victim].kill()
        wait_for(lambda: cluster.leader("t", 0) not in (victim, -1), 30, what="a new leader for t-0")
        md = cluster.metadata()
        fenced = {b["node_id"]: b["fenced"] for b in md["brokers"]}
        assert fenced[victim] is True
        assert all(victim not in p["isr"] for p in md["topics"]["t"]["partitions"])
        assert all(p["leader"] not in (victim, -1) for p in md["topics"]["t"]["partitions"])

        # Clients are told about the new leaders, and the dead broker stays in the broker list for a
        # while so that its partitions move in one step (librdkafka otherwise detours for a second).
        from confluent_kafka.admin import AdminClient

        survivor = next(b for i, b in enumerate(cluster.brokers) if i != victim)
        client_md = AdminClient({"bootstrap.servers": survivor.bootstrap}).list_topics("t", timeout=10)
        assert client_md.topics["t"].partitions[0].leader != victim
        assert victim in client_md.brokers

        # A broker stopped in a controlled way is not fenced when its session closes.
        other = cluster.leader("t", 1)
        cluster.brokers[other].stop()
        md = cluster.metadata()
        assert {b["node_id"]: b["fenced"] for b in md["brokers"]}[other] is False

