"""One active operator (a Lease, as client-go's leader election) and CRDs that only move forward,
on a real API server in the test process."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from dm_operator.crdgen import VERSION_ANNOTATION, crd
from dm_operator.crds import CrdVersions
from dm_operator.kube import Kube
from dm_operator.leadership import ElectionTiming, LeaderElector
from dm_operator.models import CRDS, SCHEMA_VERSION
from dm_testbed.client import Testbed
from kubernetes import config

FAST = ElectionTiming(lease_duration_s=3.0, renew_deadline_s=2.0, retry_period_s=0.2)


def kube_of(tb: Testbed) -> Kube:
    return Kube(config.new_client_from_config(str(tb.kubeconfig)), threads=4)


def test_one_instance_leads_and_a_standby_takes_over(apiserver: Testbed, namespace: str):
    async def go() -> None:
        kube = kube_of(apiserver)
        a = LeaderElector(kube, namespace, "op", "a", FAST)
        b = LeaderElector(kube, namespace, "op", "b", FAST)
        stop = asyncio.Event()
        try:
            assert await asyncio.wait_for(a.acquire(stop), 10)
            assert a.epoch == 0  # the controller epoch (dm_operator_leader_epoch) of the first holder
            lost_a: list[str] = []
            keeper = asyncio.create_task(a.keep(lost_a.append))
            standby = asyncio.create_task(b.acquire(stop))
            await asyncio.sleep(FAST.lease_duration_s * 2)
            assert not standby.done(), "a standby never takes a Lease its holder renews"

            # The holder stops renewing (hung, partitioned): the standby takes over after a lease duration
            # of seeing no change, by its own clock.
            keeper.cancel()
            hung_at = time.monotonic()
            assert await asyncio.wait_for(standby, 10)
            assert b.epoch == 1, "leadership changed hands: the next epoch"
            waited = time.monotonic() - hung_at
            assert FAST.lease_duration_s - FAST.retry_period_s <= waited < FAST.lease_duration_s + 3, waited
            assert not lost_a

            # The old holder, renewing again, learns it lost and says so.
            lost: list[str] = []
            await asyncio.wait_for(a.keep(lost.append), 5)
            assert lost and "held by b" in lost[0]
            lease = apiserver.kubectl_json("get", "lease", "op", "-n", namespace)
            assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1

            # A clean stop releases at once: the next standby does not wait a lease duration.
            c = LeaderElector(kube, namespace, "op", "c", FAST)
            await b.release()
            started = time.monotonic()
            assert await asyncio.wait_for(c.acquire(stop), 5)
            assert time.monotonic() - started < FAST.lease_duration_s
        finally:
            kube.close()

    asyncio.run(go())


def test_a_holder_that_cannot_renew_gives_up_before_a_standby_may_take_over():
    assert FAST.renew_deadline_s < FAST.lease_duration_s
    with pytest.raises(ValueError):
        ElectionTiming(lease_duration_s=2, renew_deadline_s=3, retry_period_s=1)


def crd_version(tb: Testbed, name: str) -> str:
    return tb.kubectl_json("get", "crd", name)["metadata"]["annotations"].get(VERSION_ANNOTATION, "")


def test_crds_move_forward_only(apiserver: Testbed):
    name = "dmclusters.dm.dev"

    async def ensure() -> CrdVersions:
        kube = kube_of(apiserver)
        try:
            versions = CrdVersions()
            await versions.ensure(kube)
            return versions
        finally:
            kube.close()

    try:
        # A newer schema installed (an upgrade rolled back): left as it is, and said.
        newer = apiserver.kubectl_json("get", "crd", name)
        newer["metadata"]["annotations"][VERSION_ANNOTATION] = "99.0.0"
        props = newer["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        props["fromTheFuture"] = {"type": "string"}
        apiserver.kubectl("replace", "--validate=false", "-f", "-", input=json.dumps(newer))
        versions = asyncio.run(ensure())
        assert name in versions.refused and "99.0.0" in versions.refused and name not in versions.updated
        after = apiserver.kubectl_json("get", "crd", name)
        assert "fromTheFuture" in after["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
            "properties"], "the newer schema's fields are not pruned"

        # An older schema: brought to this operator's.
        older = apiserver.kubectl_json("get", "crd", name)
        older["metadata"]["annotations"][VERSION_ANNOTATION] = "0.1.0"
        apiserver.kubectl("replace", "--validate=false", "-f", "-", input=json.dumps(older))
        versions = asyncio.run(ensure())
        assert name in versions.updated and not versions.refused
        assert crd_version(apiserver, name) == SCHEMA_VERSION
    finally:
        for info in CRDS:  # this schema again, whatever happened above
            wanted = crd(info)
            wanted["metadata"]["resourceVersion"] = apiserver.kubectl_json(
                "get", "crd", wanted["metadata"]["name"])["metadata"]["resourceVersion"]
            apiserver.kubectl("replace", "--validate=false", "-f", "-", input=json.dumps(wanted))
