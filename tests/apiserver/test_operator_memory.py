"""The operator freezes its clusters' long-lived objects out of the cyclic collector's way (ADR 0040); a
cluster it stops hosting must still be freed. A real Operator in the test process on a real API server:
a DMCluster's controller with a topic, frozen, then the DMCluster removed."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest
from dm_broker.controller.models import CreateTopicRequest
from dm_operator.kube import Kube
from dm_operator.operator import RELEASE_AFTER_S, Operator
from dm_operator.settings import OperatorSettings
from dm_testbed.client import Testbed
from kubernetes import config
from test_operator_runtime import NO_FENCING, create_cluster, register


@pytest.fixture(autouse=True)
def unfrozen_afterwards() -> Iterator[None]:
    yield
    gc.unfreeze()


def test_a_cluster_the_operator_stops_hosting_is_freed(apiserver: Testbed, namespace: str) -> None:
    uid = create_cluster(apiserver, namespace, {"replicas": 3, "config": NO_FENCING})

    async def go() -> tuple[weakref.ref, int]:
        kube = Kube(config.new_client_from_config(str(apiserver.kubeconfig)), threads=4)
        operator = Operator(OperatorSettings(image="dm:test", controller_url="http://operator:9990"), kube)
        try:
            operator.ensure(namespace, "c", uid)
            for _ in range(300):
                if operator.runtime(namespace, "c") is not None:
                    break
                await asyncio.sleep(0.1)
            runtime = operator.runtime(namespace, "c")
            assert runtime is not None
            for n in range(3):
                await register(runtime, n)
            await runtime.controller.create_topic(CreateTopicRequest(name="t", partitions=50, replication_factor=3))
            controller = weakref.ref(runtime.controller)
            assert operator.long_lived.settle(operator.partition_count())  # frozen: 50 partitions arrived
            del runtime
            await operator.remove(namespace, "c")
            await asyncio.sleep(RELEASE_AFTER_S + 0.5)
            return controller, operator.long_lived.releases
        finally:
            await operator.close()
            kube.close()

    controller, releases = asyncio.run(go())
    assert controller() is None, "the removed cluster's controller is still alive (frozen in a cycle)"
    assert releases >= 1
