"""The controller's Kubernetes store on a real API server, with two controllers on one cluster for a
moment — what happens when an operator pod is force-deleted: it keeps running for its last seconds
while its successor loads the state from the resources' status. The stale one's changes fail on the
version check (nothing is overwritten, no producer id is handed out twice), and then it goes on from
the stored documents instead of failing the same way until a restart.

The controllers run in the test process against a namespace the operator does not serve, so
nothing else writes these resources."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from dm_broker.controller.controller import Controller
from dm_broker.controller.models import CreateTopicRequest, RegisterRequest
from dm_broker.controller.store import ConflictError
from dm_operator.kube import Kube
from dm_operator.store import CrdStatusStore
from kubernetes import config
from substrate import Substrate
from support import apply, get_json


async def two_controllers(sub: Substrate, ns: str, cluster_uid: str) -> None:
    kube = Kube(config.new_client_from_config(str(sub.kubeconfig)), threads=2)
    try:
        old = await Controller.open(CrdStatusStore(kube, ns, "solo", cluster_uid), session_timeout_ms=2000)
        await old.register(RegisterRequest(node_id=0, host="h", port=9092, incarnation="a"))
        await old.create_topic(CreateTopicRequest(name="t", partitions=1, replication_factor=1))
        new = await Controller.open(CrdStatusStore(kube, ns, "solo", cluster_uid), session_timeout_ms=2000)
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


def test_a_stale_controller_is_refused_then_continues_from_the_stored_state(operator):
    sub = operator
    ns = f"store-{uuid.uuid4().hex[:8]}"
    sub.kubectl("create", "namespace", ns)
    try:
        apply(sub, {"apiVersion": "dm.dev/v1alpha1", "kind": "DMCluster", "metadata": {"name": "solo"},
                    "spec": {"replicas": 1, "storage": {"size": "1Gi"}}}, ns)
        uid = get_json(sub, "dmcluster", "solo", "-n", ns)["metadata"]["uid"]
        asyncio.run(two_controllers(sub, ns, uid))
        stored = get_json(sub, "topic", "t", "-n", ns)["status"]
        assert stored["configs"] == {"retention.ms": "1000", "cleanup.policy": "compact"}
        assert stored["documentVersion"] == 2
    finally:
        # No operator serves this namespace to release the Topic's finalizer.
        for item in get_json(sub, "topics", "-n", ns)["items"]:
            sub.kubectl("patch", "topic", item["metadata"]["name"], "-n", ns, "--type=merge", "-p",
                        '{"metadata":{"finalizers":null}}', check=False)
        sub.kubectl("delete", "namespace", ns, "--wait=false", check=False)
