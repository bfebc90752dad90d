"""The operator's runtime on a real API server, in the test process: a DMCluster's runtime with its
controller reconciles for real (children written, conditions, Topics), with no nodes to run pods.
Brokers are registered with the controller in-process where a test needs them. Each test has a
namespace of its own."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Iterator

import pytest
from dm_broker.controller.controller import ControllerError
from dm_broker.controller.models import (
    AlterIsrRequest,
    BrokerConfigsRequest,
    CreatePartitionsRequest,
    CreateTopicRequest,
    HeartbeatRequest,
    RegisterRequest,
)
from dm_operator.cache import ObjectCache
from dm_operator.kube import Kube
from dm_operator.metrics import API_REQUESTS, REGISTRY
from dm_operator.runtime import ClusterRuntime
from dm_operator.settings import OperatorSettings
from dm_testbed.client import Testbed
from group_clients import wait_for_async
from kubernetes import config

Check = Callable[[ClusterRuntime, Testbed, str], Awaitable[None]]


def create_cluster(tb: Testbed, ns: str, spec: dict) -> str:
    tb.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(
        {"apiVersion": "dm.dev/v1alpha1", "kind": "DMCluster", "metadata": {"name": "c"},
         "spec": {"storage": {"size": "1Gi"}, **spec}}))
    return tb.kubectl_json("get", "dmcluster", "c", "-n", ns)["metadata"]["uid"]


def with_runtime(tb: Testbed, ns: str, uid: str, check: Check) -> None:
    async def go() -> None:
        kube = Kube(config.new_client_from_config(str(tb.kubeconfig)), threads=4)
        runtime = await ClusterRuntime.open(kube, ObjectCache(kube, watched=False),
                                            OperatorSettings(image="dm:test", controller_url="http://operator:9990"),
                                            ns, "c", uid)
        try:
            await check(runtime, tb, ns)
        finally:
            await runtime.stop()
            await runtime.recorder.flush()
            kube.close()

    asyncio.run(go())


def sts(tb: Testbed, ns: str) -> dict:
    return tb.kubectl_json("get", "statefulset", "c-broker", "-n", ns)


def writes() -> dict[tuple[str, str], float]:
    """The operator's writes so far by (verb, resource): a failure names what was written."""
    return {(s.labels["verb"], s.labels["resource"]): s.value for m in API_REQUESTS.collect() for s in m.samples
            if s.name.endswith("_total") and s.labels["verb"] in ("PUT", "PATCH", "POST", "DELETE")}


def claim_patches() -> float:
    return writes().get(("PATCH", "persistentvolumeclaims"), 0.0)


def pods_in_place(tb: Testbed, ns: str) -> bool:
    """The StatefulSet controller has seen the StatefulSet as it is and every pod exists, none going. With no
    nodes the pods never run, but they are created again when the StatefulSet is, and the DMCluster's status
    counts them, so until then a pass in line with the spec still has a status to write. (Updates are
    OnDelete: a pod left at an older template revision stays, which is the operator's roll to decide.)"""
    s = sts(tb, ns)
    if (s.get("status") or {}).get("observedGeneration") != s["metadata"]["generation"]:
        return False
    selector = ",".join(f"{k}={v}" for k, v in s["spec"]["selector"]["matchLabels"].items())
    pods = tb.kubectl_json("get", "pods", "-n", ns, "-l", selector)["items"]
    return len(pods) == s["spec"]["replicas"] and not any(p["metadata"].get("deletionTimestamp") for p in pods)


async def settle(runtime: ClusterRuntime, tb: Testbed, ns: str) -> None:
    """Waits for the pods to stay as they are, then lets one pass write what they changed in the status."""
    await wait_for_async(lambda: pods_in_place(tb, ns), timeout=60, what="the StatefulSet's pods in place")
    await runtime.reconcile()


def test_children_follow_the_spec_and_hand_edits_are_put_back(apiserver: Testbed, namespace: str):
    uid = create_cluster(apiserver, namespace, {"replicas": 1, "template": {
        "tolerations": [{"key": "dedicated", "operator": "Exists"}], "nodeSelector": {"disk": "ssd"},
        "priorityClassName": "brokers", "labels": {"team": "a"}}})

    async def check(runtime: ClusterRuntime, tb: Testbed, ns: str) -> None:
        await runtime.reconcile()
        pod = sts(tb, ns)["spec"]["template"]
        assert pod["spec"]["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
        assert pod["spec"]["nodeSelector"] == {"disk": "ssd"} and pod["spec"]["priorityClassName"] == "brokers"
        assert pod["metadata"]["labels"]["team"] == "a"
        assert sts(tb, ns)["spec"]["template"]["spec"]["containers"][0]["resources"] == {
            "requests": {"cpu": "250m", "memory": "512Mi"}}, "no BestEffort broker"

        # Fields removed from the spec leave the StatefulSet (a merge patch kept them).
        tb.kubectl("patch", "dmcluster", "c", "-n", ns, "--type=json", "-p", json.dumps([
            {"op": "remove", "path": "/spec/template/tolerations"},
            {"op": "remove", "path": "/spec/template/nodeSelector"},
            {"op": "remove", "path": "/spec/template/priorityClassName"},
            {"op": "remove", "path": "/spec/template/labels"}]))
        await runtime.reconcile()
        pod = sts(tb, ns)["spec"]["template"]
        assert "tolerations" not in pod["spec"] and "nodeSelector" not in pod["spec"]
        assert "priorityClassName" not in pod["spec"] and "team" not in pod["metadata"]["labels"]

        # Hand edits of children are put back, with an Event; others' annotations stay.
        tb.kubectl("patch", "statefulset", "c-broker", "-n", ns, "--type=merge", "-p", json.dumps(
            {"metadata": {"annotations": {"someone/else": "kept"}},
             "spec": {"template": {"spec": {"nodeSelector": {"by": "hand"}, "terminationGracePeriodSeconds": 1}}}}))
        tb.kubectl("patch", "configmap", "c-config", "-n", ns, "--type=merge", "-p",
                   json.dumps({"data": {"broker.properties": "num.partitions=99\n"}}))
        tb.kubectl("patch", "service", "c-bootstrap", "-n", ns, "--type=merge", "-p",
                   json.dumps({"spec": {"selector": {"app.kubernetes.io/name": "other"}}}))
        await runtime.reconcile()
        live = sts(tb, ns)
        assert "nodeSelector" not in live["spec"]["template"]["spec"]
        assert live["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 30
        assert live["metadata"]["annotations"]["someone/else"] == "kept"
        assert "num.partitions" not in tb.kubectl_json("get", "configmap", "c-config", "-n", ns)["data"][
            "broker.properties"]
        selector = tb.kubectl_json("get", "service", "c-bootstrap", "-n", ns)["spec"]["selector"]
        assert selector["app.kubernetes.io/name"] == "dm" and selector["app.kubernetes.io/instance"] == "c"
        await runtime.recorder.flush()
        events = tb.kubectl_json("get", "events", "-n", ns)["items"]
        assert sum(e["reason"] == "DriftCorrected" for e in events) >= 3, [e["reason"] for e in events]

        # In line with the spec, a pass writes nothing (once the StatefulSet's pods are in place again).
        await settle(runtime, tb, ns)
        before = writes()
        await runtime.reconcile()
        await runtime.reconcile()
        assert writes() == before

    with_runtime(apiserver, namespace, uid, check)


def test_the_brokers_network_policy_follows_the_spec(apiserver: Testbed, namespace: str):
    """The brokers' NetworkPolicy (issue 65): made with the cluster, put back when edited by hand, gone when
    spec.networkPolicy.enabled is false."""
    uid = create_cluster(apiserver, namespace, {"replicas": 1})

    def policy(tb: Testbed, ns: str) -> dict | None:
        found = tb.kubectl_json("get", "networkpolicies", "-n", ns)["items"]
        return found[0] if found else None

    async def check(runtime: ClusterRuntime, tb: Testbed, ns: str) -> None:
        await runtime.reconcile()
        made = policy(tb, ns)
        assert made is not None and made["metadata"]["name"] == "c-brokers"
        clients, http = made["spec"]["ingress"]
        assert [p["port"] for p in clients["ports"]] == [9092] and "from" not in clients
        assert [p["port"] for p in http["ports"]] == [8080] and http["from"]
        tb.kubectl("patch", "networkpolicy", "c-brokers", "-n", ns, "--type=json", "-p", json.dumps(
            [{"op": "remove", "path": "/spec/ingress/1"}]))
        await runtime.reconcile()
        assert len(policy(tb, ns)["spec"]["ingress"]) == 2
        tb.kubectl("patch", "dmcluster", "c", "-n", ns, "--type=merge", "-p",
                   json.dumps({"spec": {"networkPolicy": {"enabled": False}}}))
        await runtime.reconcile()
        assert policy(tb, ns) is None

    with_runtime(apiserver, namespace, uid, check)


def test_controller_settings_follow_spec_config_at_the_next_reconcile(apiserver: Testbed, namespace: str):
    uid = create_cluster(apiserver, namespace, {"replicas": 1, "config": {
        "unclean.leader.election.enable": False, "broker.session.timeout.ms": 6000}})

    async def check(runtime: ClusterRuntime, tb: Testbed, ns: str) -> None:
        await runtime.reconcile()
        assert not runtime.controller.unclean_default and runtime.controller.session_timeout == 6.0
        tb.kubectl("patch", "dmcluster", "c", "-n", ns, "--type=merge", "-p", json.dumps(
            {"spec": {"config": {"unclean.leader.election.enable": True, "broker.session.timeout.ms": 20000}}}))
        await runtime.reconcile()
        assert runtime.controller.unclean_default and runtime.controller.session_timeout == 20.0

    with_runtime(apiserver, namespace, uid, check)


# Brokers registered in-process never heartbeat: a session as long as the test keeps them from being fenced
# when a loaded machine makes the test slow (under make test it was: "fencing broker 0: session timed out").
NO_FENCING = {"broker.session.timeout.ms": 600_000}


async def register(runtime: ClusterRuntime, node: int) -> int:
    resp = await runtime.controller.register(RegisterRequest(node_id=node, host=f"b{node}", port=9092,
                                                             incarnation=f"i{node}"))
    return resp.broker_epoch


def test_moves_after_a_scale_up_run_throttled_and_the_throttle_goes_when_done(apiserver: Testbed, namespace: str):
    uid = create_cluster(apiserver, namespace, {"replicas": 2, "rebalance": {"throttle": 7_000_000},
                                                "config": NO_FENCING})

    async def check(runtime: ClusterRuntime, tb: Testbed, ns: str) -> None:
        controller = runtime.controller
        epochs = {n: await register(runtime, n) for n in (0, 1)}
        await controller.create_topic(CreateTopicRequest(name="t", partitions=6, replication_factor=1))
        await runtime.reconcile()  # the placement of a new cluster is the baseline
        assert runtime.mover.balanced == 2
        tb.kubectl("patch", "dmcluster", "c", "-n", ns, "--type=merge", "-p", '{"spec":{"replicas":3}}')
        epochs[2] = await register(runtime, 2)
        await runtime.reconcile()
        rates = controller.cluster.broker_configs[""]
        assert rates == {"leader.replication.throttled.rate": "7000000",
                         "follower.replication.throttled.rate": "7000000"}
        moving = [(i, p) for i, p in enumerate(controller.topics["t"].partitions) if p.reassigning]
        assert moving and all(p.adding_replicas == [2] for _, p in moving)
        status = tb.kubectl_json("get", "dmcluster", "c", "-n", ns)["status"]
        assert status["rebalance"]["throttle"] == 7_000_000
        assert status["rebalance"]["partitionsMoving"] == len(moving)
        leader = moving[0][1].leader
        await controller.heartbeat(HeartbeatRequest(node_id=leader, broker_epoch=epochs[leader],
                                                    reassignment_lag={f"t:{moving[0][0]}": 12345}))
        await runtime.reconcile()
        status = tb.kubectl_json("get", "dmcluster", "c", "-n", ns)["status"]
        assert status["rebalance"]["bytesLeft"] == 12345

        # The new replicas catch up: their leaders add them to the ISR, the moves complete.
        for i, p in moving:
            await controller.alter_isr(AlterIsrRequest(node_id=p.leader, broker_epoch=epochs[p.leader], topic="t",
                                                       partition=i, leader_epoch=p.leader_epoch,
                                                       partition_epoch=p.partition_epoch, new_isr=[*p.isr, 2]))
        assert not any(p.reassigning for p in controller.topics["t"].partitions)
        await runtime.reconcile()
        assert controller.cluster.broker_configs.get("", {}) == {}, "the operator's throttle is removed"
        status = tb.kubectl_json("get", "dmcluster", "c", "-n", ns)["status"]
        assert status["rebalance"] == {"partitionsMoving": 0, "bytesLeft": 0}  # throttle: null, removed

    with_runtime(apiserver, namespace, uid, check)


def test_a_throttle_someone_else_set_is_left_alone(apiserver: Testbed, namespace: str):
    uid = create_cluster(apiserver, namespace, {"replicas": 2, "config": NO_FENCING})

    async def check(runtime: ClusterRuntime, tb: Testbed, ns: str) -> None:
        controller = runtime.controller
        for n in (0, 1):
            await register(runtime, n)
        await controller.alter_broker_configs(BrokerConfigsRequest(broker="", configs={
            "leader.replication.throttled.rate": "1000", "follower.replication.throttled.rate": "1000"}))
        await runtime.mover.throttle(50_000_000)
        await runtime.mover.settle()
        assert controller.cluster.broker_configs[""]["leader.replication.throttled.rate"] == "1000"

    with_runtime(apiserver, namespace, uid, check)


def test_a_topic_of_ten_thousand_partitions_fits_its_status_and_a_larger_one_is_refused(apiserver: Testbed,
                                                                                         namespace: str):
    uid = create_cluster(apiserver, namespace, {"replicas": 3, "config": NO_FENCING})

    async def check(runtime: ClusterRuntime, tb: Testbed, ns: str) -> None:
        for n in range(12):
            await register(runtime, n)
        await runtime.controller.create_topic(CreateTopicRequest(name="big", partitions=10_000, replication_factor=3))
        status = tb.kubectl_json("get", "topic", "big", "-n", ns)["status"]
        assert status["partitionCount"] == 10_000 and len(status["partitions"]) == 10_000
        with pytest.raises(ControllerError) as refused:
            await runtime.controller.create_topic(CreateTopicRequest(name="wide", partitions=10_000,
                                                                     replication_factor=12))
        assert refused.value.error == "invalid_partitions" and "do not fit" in refused.value.message
        assert "wide" not in runtime.controller.topics and "wide" not in tb.kubectl("get", "topics", "-n", ns).stdout
        await runtime.controller.create_topic(CreateTopicRequest(name="wide", partitions=4_000, replication_factor=12))
        with pytest.raises(ControllerError) as refused:  # growing into a size that does not fit: refused too
            await runtime.controller.create_partitions("wide", CreatePartitionsRequest(count=10_000))
        assert "do not fit" in refused.value.message and len(runtime.controller.topics["wide"].partitions) == 4_000

    with_runtime(apiserver, namespace, uid, check)


def _storage_class(tb: Testbed, name: str, expandable: bool) -> None:
    tb.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
         "provisioner": "example.com/none", "allowVolumeExpansion": expandable}))


def _cluster_with_its_class(tb: Testbed, ns: str, replicas: int, expandable: bool) -> str:
    """A DMCluster of 1Gi volumes from a storage class of its own (classes belong to no namespace)."""
    _storage_class(tb, f"{ns}-class", expandable)
    return create_cluster(tb, ns, {"replicas": replicas, "storage": {"size": "1Gi", "storageClassName": f"{ns}-class"}})


def _resize(tb: Testbed, ns: str, size: str) -> None:
    tb.kubectl("patch", "dmcluster", "c", "-n", ns, "--type=merge", "-p",
               json.dumps({"spec": {"storage": {"size": size}}}))


@contextlib.contextmanager
def _bound_claims(tb: Testbed, ns: str, count: int, capacity: str) -> Iterator[None]:
    """What the StatefulSet controller and a provisioner would make (no pods run here): a claim per broker
    from the template, and a volume of `capacity` made for it, which the control plane's volume binder
    binds to it. The volumes are removed afterwards (they belong to no namespace)."""
    template = sts(tb, ns)["spec"]["volumeClaimTemplates"][0]
    volumes = [f"{ns}-{i}" for i in range(count)]
    try:
        for i, volume in enumerate(volumes):
            name = f"data-c-broker-{i}"
            tb.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(
                {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                 "metadata": {"name": name, "labels": template["metadata"]["labels"]}, "spec": template["spec"]}))
            tb.kubectl("apply", "-f", "-", input=json.dumps(
                {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume},
                 "spec": {"capacity": {"storage": capacity}, "accessModes": ["ReadWriteOnce"],
                          "storageClassName": template["spec"]["storageClassName"],
                          "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": f"/tmp/{volume}"},
                          "claimRef": {"namespace": ns, "name": name}}}))
        deadline = time.monotonic() + 60
        while {c["status"].get("phase") for c in tb.kubectl_json("get", "pvc", "-n", ns)["items"]} != {"Bound"}:
            assert time.monotonic() < deadline, "the volume binder did not bind the claims"
            time.sleep(0.2)
        yield
    finally:
        for volume in volumes:
            tb.kubectl("delete", "pv", volume, "--wait=false", "--ignore-not-found")


def _with_bound_claims(tb: Testbed, ns: str, uid: str, count: int, body: Check) -> None:
    async def check(runtime: ClusterRuntime, tb: Testbed, ns: str) -> None:
        await runtime.reconcile()  # the StatefulSet, whose claim template the claims follow
        with _bound_claims(tb, ns, count, "1Gi"):
            await body(runtime, tb, ns)

    with_runtime(tb, ns, uid, check)


def _grown_by_the_provider(tb: Testbed, ns: str, count: int, capacity: str) -> None:
    from kubernetes import client

    api = client.CoreV1Api(config.new_client_from_config(str(tb.kubeconfig)))
    for i in range(count):
        api.patch_namespaced_persistent_volume_claim_status(
            f"data-c-broker-{i}", ns, {"status": {"capacity": {"storage": capacity}}})
    api.api_client.close()


def _claim_sizes(tb: Testbed, ns: str) -> dict[str, str]:
    return {c["metadata"]["name"]: c["spec"]["resources"]["requests"]["storage"]
            for c in tb.kubectl_json("get", "pvc", "-n", ns)["items"]}


def _volumes_condition(tb: Testbed, ns: str) -> tuple[str, str, str]:
    found = {c["type"]: c for c in tb.kubectl_json("get", "dmcluster", "c", "-n", ns)["status"]["conditions"]}
    c = found["VolumesExpanded"]
    return c["status"], c["reason"], c.get("message", "")


def test_broker_volumes_grow_with_the_spec_where_the_storage_class_allows(apiserver: Testbed, namespace: str):
    uid = _cluster_with_its_class(apiserver, namespace, 2, expandable=True)

    async def grow(runtime: ClusterRuntime, tb: Testbed, ns: str) -> None:
        await runtime.reconcile()
        assert _volumes_condition(tb, ns)[:2] == ("True", "AtSize")

        _resize(tb, ns, "2Gi")
        await runtime.reconcile()
        assert _claim_sizes(tb, ns) == {"data-c-broker-0": "2Gi", "data-c-broker-1": "2Gi"}
        status, reason, message = _volumes_condition(tb, ns)
        assert (status, reason) == ("False", "Expanding") and "data-c-broker-0" in message
        assert sts(tb, ns)["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "1Gi"

        _grown_by_the_provider(tb, ns, 2, "2Gi")
        await runtime.reconcile()
        assert _volumes_condition(tb, ns)[:2] == ("True", "AtSize")

        # A smaller size is reported, never applied.
        _resize(tb, ns, "1Gi")
        await runtime.reconcile()
        assert _volumes_condition(tb, ns)[:2] == ("False", "ShrinkNotSupported")
        assert set(_claim_sizes(tb, ns).values()) == {"2Gi"}
        await runtime.recorder.flush()
        events = [e["reason"] for e in tb.kubectl_json("get", "events", "-n", ns)["items"]]
        assert events.count("VolumeExpansion") == 2, events

    _with_bound_claims(apiserver, namespace, uid, 2, grow)


def test_a_storage_class_without_expansion_is_reported_once(apiserver: Testbed, namespace: str):
    uid = _cluster_with_its_class(apiserver, namespace, 1, expandable=False)

    async def refused(runtime: ClusterRuntime, tb: Testbed, ns: str) -> None:
        start = claim_patches()
        _resize(tb, ns, "5Gi")
        await runtime.reconcile()
        for _ in range(2):  # the same claim is not asked again at every pass
            await runtime.reconcile()
        assert claim_patches() - start == 1
        status, reason, message = _volumes_condition(tb, ns)
        assert (status, reason) == ("False", "ExpansionRefused"), message
        assert "data-c-broker-0" in message and "storageclass" in message.lower(), message
        assert _claim_sizes(tb, ns) == {"data-c-broker-0": "1Gi"}
        await runtime.recorder.flush()
        events = [e["reason"] for e in tb.kubectl_json("get", "events", "-n", ns)["items"]]
        assert events.count("VolumeExpansionRefused") == 1, events

    _with_bound_claims(apiserver, namespace, uid, 1, refused)


FULL = ("dm: log directory /var/lib/dm/data failed: No space left on device (ENOSPC); the broker stops so that "
        "nothing it cannot keep is acknowledged.")


def test_a_file_system_that_grows_offline_restarts_its_broker_once(apiserver: Testbed, namespace: str):
    """The control plane's StatefulSet controller makes the pods (no node runs them); they are marked Ready
    as a kubelet would."""
    uid = _cluster_with_its_class(apiserver, namespace, 2, expandable=True)

    def pod_uids(tb: Testbed, ns: str) -> dict[str, str]:
        return {p["metadata"]["name"]: p["metadata"]["uid"] for p in tb.kubectl_json("get", "pods", "-n", ns)["items"]}

    def all_ready(tb: Testbed, ns: str, api) -> None:
        deadline = time.monotonic() + 60
        while sorted(pod_uids(tb, ns)) != ["c-broker-0", "c-broker-1"]:
            assert time.monotonic() < deadline, "the StatefulSet controller made no pods"
            time.sleep(0.2)
        for name in pod_uids(tb, ns):
            api.patch_namespaced_pod_status(name, ns, {"status": {
                "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})

    async def check(runtime: ClusterRuntime, tb: Testbed, ns: str) -> None:
        from kubernetes import client

        api = client.CoreV1Api(config.new_client_from_config(str(tb.kubeconfig)))
        await runtime.reconcile()
        try:
            with _bound_claims(tb, ns, 2, "1Gi"):
                all_ready(tb, ns, api)
                # Broker 0 stopped once for its full volume (ADR 0041): the status says so.
                stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                api.patch_namespaced_pod_status("c-broker-0", ns, {"status": {"containerStatuses": [{
                    "name": "broker", "ready": True, "restartCount": 1, "image": "dm:test", "imageID": "",
                    "state": {"running": {"startedAt": stamp}},
                    "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": stamp,
                                                 "finishedAt": stamp, "message": FULL}}}]}})
                await runtime.reconcile()
                brokers = tb.kubectl_json("get", "dmcluster", "c", "-n", ns)["status"]["brokers"]
                assert brokers[0]["lastFailure"] == f"{stamp}: exit 1 (Error): {FULL}"
                assert "lastFailure" not in brokers[1] or brokers[1]["lastFailure"] is None
                before = pod_uids(tb, ns)
                await asyncio.sleep(1.1)  # the wait begins after the pods were made (the times have seconds)
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                api.patch_namespaced_persistent_volume_claim_status("data-c-broker-1", ns, {"status": {
                    "conditions": [{"type": "FileSystemResizePending", "status": "True", "lastTransitionTime": now}]}})
                await runtime.reconcile()
                assert _volumes_condition(tb, ns)[:2] == ("False", "FileSystemResizePending")
                deadline = time.monotonic() + 60
                while pod_uids(tb, ns).get("c-broker-1", before["c-broker-1"]) == before["c-broker-1"]:
                    assert time.monotonic() < deadline, "broker 1's pod was not replaced"
                    await asyncio.sleep(0.2)
                after = pod_uids(tb, ns)
                assert after["c-broker-0"] == before["c-broker-0"]
                # The new pod mounts the grown volume; until its kubelet clears the condition it is not
                # restarted again.
                for _ in range(2):
                    await runtime.reconcile()
                await asyncio.sleep(1)
                assert pod_uids(tb, ns)["c-broker-1"] == after["c-broker-1"]
                await runtime.recorder.flush()
                restarts = [e["message"] for e in tb.kubectl_json("get", "events", "-n", ns)["items"]
                            if e["reason"] == "RollingRestart"]
                assert restarts == ["restarting broker 1 (pod c-broker-1) so that its volume's file system grows "
                                    "(offline expansion)"], restarts
        finally:
            api.api_client.close()

    with_runtime(apiserver, namespace, uid, check)


def test_a_broker_stranded_by_a_lost_node_gets_a_new_volume_on_a_decision(apiserver: Testbed, namespace: str):
    """No node exists here, so a volume pinned to one by name is on a node that is gone (ADR 0054). Broker 0's
    volume is pinned to no node (as a network volume), broker 1's to a node that is gone; the StatefulSet
    controller makes the pods, which no scheduler places."""
    uid = create_cluster(apiserver, namespace, {"replicas": 2})
    lost = f"{namespace}-lost-node"

    def claim_of(tb: Testbed, ns: str, broker: int) -> dict | None:
        found = tb.kubectl("get", "pvc", f"data-c-broker-{broker}", "-n", ns, "-o", "json", check=False)
        return json.loads(found.stdout) if found.returncode == 0 else None

    def lost_condition(tb: Testbed, ns: str) -> dict:
        return next(c for c in tb.kubectl_json("get", "dmcluster", "c", "-n", ns)["status"]["conditions"]
                    if c["type"] == "VolumesOnLostNodes")

    async def check(runtime: ClusterRuntime, tb: Testbed, ns: str) -> None:
        await runtime.reconcile()  # the StatefulSet: its controller makes the claims and the pods
        template = sts(tb, ns)["spec"]["volumeClaimTemplates"][0]
        volumes = {0: f"{ns}-net", 1: f"{ns}-local"}
        try:
            for broker, volume in volumes.items():
                tb.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(
                    {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                     "metadata": {"name": f"data-c-broker-{broker}", "labels": template["metadata"]["labels"]},
                     "spec": template["spec"]}))
                affinity = {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [lost]}]}]}}} if broker else {}
                tb.kubectl("apply", "-f", "-", input=json.dumps(
                    {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume},
                     "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                              "persistentVolumeReclaimPolicy": "Delete", "hostPath": {"path": f"/tmp/{volume}"},
                              "claimRef": {"namespace": ns, "name": f"data-c-broker-{broker}"}, **affinity}}))
            await wait_for_async(lambda: all((claim_of(tb, ns, b) or {}).get("status", {}).get("phase") == "Bound"
                                             for b in volumes) and len(tb.kubectl_json("get", "pods", "-n", ns)
                                                                       ["items"]) == 2, 60)
            await runtime.reconcile()
            waiting = lost_condition(tb, ns)
            assert (waiting["status"], waiting["reason"]) == ("True", "DecisionNeeded"), waiting
            assert f"broker 1's volume {ns}-local is on node {lost}, which is gone" in waiting["message"]
            assert "broker 0" not in waiting["message"]
            labels = {"namespace": ns, "cluster": "c"}
            assert REGISTRY.get_sample_value("dm_operator_brokers_on_lost_nodes", labels) == 1
            for _ in range(2):  # nothing happens without a decision
                await runtime.reconcile()
            assert (REGISTRY.get_sample_value("dm_operator_volumes_replaced_total", labels) or 0) == 0
            before = claim_of(tb, ns, 1)["metadata"]["uid"]

            tb.kubectl("annotate", "pvc", "data-c-broker-1", "-n", ns, "dm.dev/replace-volume=true")
            await runtime.reconcile()
            kept = tb.kubectl_json("get", "pv", f"{ns}-local")
            assert kept["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
            assert kept["metadata"]["annotations"]["dm.dev/lost-node"] == lost
            assert kept["metadata"]["annotations"]["dm.dev/replaced-claim"] == f"{ns}/data-c-broker-1"

            async def made_again() -> bool:
                await runtime.reconcile()  # a pod made while the old claim was terminating is made again
                claim = claim_of(tb, ns, 1)
                return claim is not None and claim["metadata"]["uid"] != before and \
                    not claim["metadata"].get("deletionTimestamp") and \
                    "c-broker-1" in {p["metadata"]["name"] for p in tb.kubectl_json("get", "pods", "-n", ns)["items"]}

            deadline = time.monotonic() + 90
            while not await made_again():
                assert time.monotonic() < deadline, "the StatefulSet made no new claim for broker 1"
                await asyncio.sleep(1)
            assert claim_of(tb, ns, 0)["spec"]["volumeName"] == f"{ns}-net"  # the other broker's is untouched
            await runtime.reconcile()
            assert lost_condition(tb, ns)["reason"] == "None"
            assert REGISTRY.get_sample_value("dm_operator_brokers_on_lost_nodes", labels) == 0
            assert REGISTRY.get_sample_value("dm_operator_volumes_replaced_total", labels) == 1
            await runtime.recorder.flush()
            replaced = [e["message"] for e in tb.kubectl_json("get", "events", "-n", ns)["items"]
                        if e["reason"] == "VolumeReplaced"]
            assert len(replaced) == 1 and f"was on node {lost}, which is gone" in replaced[0], replaced
        finally:
            for volume in volumes.values():
                tb.kubectl("delete", "pv", volume, "--wait=false", "--ignore-not-found")

    with_runtime(apiserver, namespace, uid, check)
