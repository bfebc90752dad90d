"""The controller's Kubernetes store on a real API server, with two controllers on one cluster for a
moment — what happens when an operator pod is force-deleted: it keeps running for its last seconds
while its successor loads the state from the resources' status. The stale one's changes fail on the
version check (nothing is overwritten, no producer id is handed out twice), and then it goes on from
the stored documents instead of failing the same way until a restart.

The controllers run in the test process against the testbed's API server, in a namespace of the
test's own: nothing else writes these resources."""

from __future__ import annotations

import asyncio
import json

import pytest
from dm_broker.controller.controller import Controller
from dm_broker.controller.models import CreateTopicRequest, RegisterRequest
from dm_broker.controller.store import ConflictError
from dm_operator.kube import Kube
from dm_operator.store import CrdStatusStore
from dm_testbed.client import Testbed
from kubernetes import config


async def two_controllers(tb: Testbed, ns: str, cluster_uid: str) -> None:
    kube = Kube(config.new_client_from_config(str(tb.kubeconfig)), threads=2)
    try:
        old = await Controller.open(CrdStatusStore(kube, ns, "solo", cluster_uid),
                                   session_timeout_ms=600_000)  # its broker never heartbeats
        await old.register(RegisterRequest(node_id=0, host="h", port=9092, incarnation="a"))
        await old.create_topic(CreateTopicRequest(name="t", partitions=1, replication_factor=1))
        new = await Controller.open(CrdStatusStore(kube, ns, "solo", cluster_uid),
                                   session_timeout_ms=600_000)  # its broker never heartbeats
        await old.alter_configs("t", {"retention.ms": "1000"})
        first_block = (await old.allocate_producer_ids()).first

        with pytest.raises(ConflictError):
            await new.alter_configs("t", {"cleanup.policy": "compact"})
        assert new.topics["t"].configs == {"retention.ms": "1000"}, "the stored document, not the stale one"
        await new.alter_configs("t", {"retention.ms": "1000", "cleanup.policy": "compact"})

        with pytest.raises(ConflictError):
            await new.allocate_producer_ids()
        assert (await new.allocate_producer_ids()).first > first_block, "no producer id handed out twice"
    finally:
        kube.close()


def test_a_stale_controller_is_refused_then_continues_from_the_stored_state(apiserver: Testbed, namespace: str):
    apiserver.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(
        {"apiVersion": "dm.dev/v1alpha1", "kind": "DMCluster", "metadata": {"name": "solo"},
         "spec": {"replicas": 1, "storage": {"size": "1Gi"}}}))
    uid = apiserver.kubectl_json("get", "dmcluster", "solo", "-n", namespace)["metadata"]["uid"]
    asyncio.run(two_controllers(apiserver, namespace, uid))
    stored = apiserver.kubectl_json("get", "topic", "t", "-n", namespace)["status"]
    assert stored["configs"] == {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert stored["documentVersion"] == 2
