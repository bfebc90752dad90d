"""Deletions without finalizers (ADR 0061), on a real API server: a Topic or User deleted is acted on by
the next pass — its topic deleted, its credentials, ACLs and quotas revoked — and only when the deletion
was about it alone; nothing carries a finalizer, and those of earlier versions come off."""

from __future__ import annotations

import asyncio
import json
import uuid

from dm_broker.controller.models import CreateTopicRequest
from dm_operator.deletions import wider_deletion
from dm_operator.kube import Kube
from dm_operator.naming import users_record
from dm_operator.runtime import ClusterRuntime
from dm_operator.user_record import parse
from dm_testbed.client import Testbed
from kubernetes import config
from test_operator_runtime import NO_FENCING, create_cluster, register, with_runtime
from test_operator_security import SECURED, apply_user

ACL = {"resource": {"type": "topic", "name": "orders"}, "operations": ["Read"]}


def apply_topic(tb: Testbed, ns: str, name: str, finalizers: list[str] | None = None) -> None:
    meta: dict = {"name": name}
    if finalizers:
        meta["finalizers"] = finalizers
    tb.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(
        {"apiVersion": "dm.dev/v1alpha1", "kind": "Topic", "metadata": meta,
         "spec": {"cluster": "c", "partitions": 1, "replicas": 1}}))


def events(tb: Testbed, ns: str, reason: str) -> list[str]:
    return [e["message"] for e in tb.kubectl_json("get", "events", "-n", ns)["items"] if e["reason"] == reason]


def finalizers(tb: Testbed, ns: str, kind: str, name: str) -> list[str]:
    return tb.kubectl_json("get", kind, name, "-n", ns)["metadata"].get("finalizers") or []


def test_a_deleted_topic_is_deleted_and_one_created_again_is_a_new_topic(apiserver: Testbed, namespace: str):
    uid = create_cluster(apiserver, namespace, {"replicas": 1, "config": NO_FENCING})

    async def check(runtime: ClusterRuntime, tb: Testbed, ns: str) -> None:
        await register(runtime, 0)
        controller = runtime.controller
        apply_topic(tb, ns, "orders")
        await runtime.topics.reconcile_all()
        first = controller.topics["orders"].topic_id
        assert finalizers(tb, ns, "topic", "orders") == [], "the operator puts no finalizer on a Topic"

        tb.kubectl("delete", "topic", "orders", "-n", ns)  # returns once it is gone: nothing holds it
        await runtime.topics.reconcile_all()
        assert "orders" not in controller.topics
        assert any(t.topic_id == first for t in controller.cluster.deleted_topics), "a tombstone lets brokers delete"

        # Deleted and created again before a pass: another resource (another UID), so another topic.
        apply_topic(tb, ns, "orders")
        await runtime.topics.reconcile_all()
        second = controller.topics["orders"].topic_id
        tb.kubectl("delete", "topic", "orders", "-n", ns)
        apply_topic(tb, ns, "orders")
        await runtime.topics.reconcile_all()
        await runtime.topics.reconcile_all()
        third = controller.topics["orders"].topic_id
        assert len({first, second, third}) == 3
        assert tb.kubectl_json("get", "topic", "orders", "-n", ns)["status"]["topicId"] == third

        # An internal topic cannot be deleted: its metadata gets a resource again.
        await controller.create_topic(CreateTopicRequest(name="__consumer_offsets", partitions=1,
                                                         replication_factor=1, internal=True))
        internal = runtime.store.resources["__consumer_offsets"]
        tb.kubectl("delete", "topic", internal, "-n", ns)
        await runtime.topics.reconcile_all()
        assert "__consumer_offsets" in controller.topics
        again = tb.kubectl_json("get", "topic", runtime.store.resources["__consumer_offsets"], "-n", ns)
        assert again["status"]["topicName"] == "__consumer_offsets"
        assert again["status"]["documentVersion"] == controller.topics["__consumer_offsets"].version
        await runtime.recorder.flush()
        assert len(events(tb, ns, "TopicDeleted")) == 2 and events(tb, ns, "TopicResourceRecreated")

    with_runtime(apiserver, namespace, uid, check)


def test_an_earlier_versions_topic_finalizer_comes_off_and_its_deletion_is_done(apiserver: Testbed, namespace: str):
    uid = create_cluster(apiserver, namespace, {"replicas": 1, "config": NO_FENCING})

    async def check(runtime: ClusterRuntime, tb: Testbed, ns: str) -> None:
        await register(runtime, 0)
        apply_topic(tb, ns, "kept", ["dm.dev/topic"])
        apply_topic(tb, ns, "going", ["dm.dev/topic"])
        await runtime.topics.reconcile_all()
        assert finalizers(tb, ns, "topic", "kept") == [], "taken off"
        await runtime.topics.reconcile_all()
        assert {"kept", "going"} <= set(runtime.controller.topics)
        tb.kubectl("patch", "topic", "going", "-n", ns, "--type=merge", "-p",
                   '{"metadata":{"finalizers":["dm.dev/topic"]}}')
        tb.kubectl("delete", "topic", "going", "-n", ns, "--wait=false")
        await runtime.topics.reconcile_all()
        assert "going" not in runtime.controller.topics and "kept" in runtime.controller.topics
        assert tb.kubectl("get", "topic", "going", "-n", ns, check=False).returncode != 0, "released"

    with_runtime(apiserver, namespace, uid, check)


def test_a_namespace_being_deleted_deletes_no_topic_and_revokes_no_user(apiserver: Testbed):
    ns = f"t-{uuid.uuid4().hex[:8]}"
    apiserver.kubectl("create", "namespace", ns)
    # Someone else's finalizer holds the namespace in Terminating while the test looks.
    apiserver.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "held", "finalizers": ["example.com/hold"]}}))
    uid = create_cluster(apiserver, ns, {**SECURED, "config": NO_FENCING})

    async def check(runtime: ClusterRuntime, tb: Testbed, ns: str) -> None:
        await register(runtime, 0)
        apply_topic(tb, ns, "orders")
        apply_user(tb, ns, "alice", {"authentication": {"type": "scram-sha-512"}, "authorization": {"acls": [ACL]}})
        await runtime.reconcile()
        await runtime.topics.reconcile_all()
        controller = runtime.controller
        assert "orders" in controller.topics and "alice" in controller.cluster.scram
        tb.kubectl("delete", "namespace", ns, "--wait=false")
        await asyncio.sleep(0)
        for _ in range(100):
            if not tb.kubectl_json("get", "topics,users", "-n", ns)["items"]:
                break
            await asyncio.sleep(0.1)
        assert not tb.kubectl_json("get", "topics,users", "-n", ns)["items"], "nothing holds them"
        await runtime.topics.reconcile_all()
        await runtime.users.reconcile_all(runtime.spec, None)
        assert "orders" in controller.topics, "a namespace going is no decision about its topics"
        assert "alice" in controller.cluster.scram and any(a.principal == "User:alice" for a in controller.cluster.acls)

    try:
        with_runtime(apiserver, ns, uid, check)
    finally:
        apiserver.kubectl("patch", "configmap", "held", "-n", ns, "--type=merge", "-p",
                          '{"metadata":{"finalizers":null}}', check=False)


def test_wider_deletions_are_told_apart(apiserver: Testbed, namespace: str):
    """A CRD being deleted (a throwaway one, held by an instance's finalizer) and a DMCluster that is gone
    are wider than the resource; nothing of that kind is not."""
    tb = apiserver
    group_crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                 "metadata": {"name": "widgets.dm.dev"},
                 "spec": {"group": "dm.dev", "scope": "Namespaced",
                          "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                          "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                                        "schema": {"openAPIV3Schema": {"type": "object"}}}]}}
    create_cluster(tb, namespace, {"replicas": 1})
    cluster_path = f"/apis/dm.dev/v1alpha1/namespaces/{namespace}/dmclusters/c"

    async def ask(plural: str, path: str = cluster_path) -> str | None:
        kube = Kube(config.new_client_from_config(str(tb.kubeconfig)), threads=2)
        try:
            return await wider_deletion(kube, namespace, path, plural)
        finally:
            kube.close()

    assert asyncio.run(ask("topics")) is None
    assert "DMCluster gone is being deleted" in asyncio.run(ask("topics", cluster_path[:-1] + "gone"))
    tb.kubectl("apply", "-f", "-", input=json.dumps(group_crd))
    try:
        for _ in range(50):
            if tb.kubectl("get", "widgets", "-n", namespace, check=False).returncode == 0:
                break
            asyncio.run(asyncio.sleep(0.2))
        tb.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(
            {"apiVersion": "dm.dev/v1alpha1", "kind": "Widget",
             "metadata": {"name": "w", "finalizers": ["example.com/hold"]}}))
        assert asyncio.run(ask("widgets")) is None
        tb.kubectl("delete", "crd", "widgets.dm.dev", "--wait=false")
        assert "CustomResourceDefinition widgets.dm.dev is being deleted" in (asyncio.run(ask("widgets")) or "")
    finally:
        tb.kubectl("patch", "widgets.dm.dev", "w", "-n", namespace, "--type=merge", "-p",
                   '{"metadata":{"finalizers":null}}', check=False)
        tb.kubectl("delete", "crd", "widgets.dm.dev", "--wait=false", check=False)


def test_users_are_recorded_and_revoked_after_they_are_gone(apiserver: Testbed, namespace: str):
    uid = create_cluster(apiserver, namespace, {**SECURED, "config": NO_FENCING})
    scram = {"authentication": {"type": "scram-sha-512"}, "authorization": {"acls": [ACL]},
             "quotas": {"producerByteRate": 1048576}}

    async def first_run(runtime: ClusterRuntime, tb: Testbed, ns: str) -> None:
        await register(runtime, 0)
        apply_user(tb, ns, "alice", scram)
        apply_user(tb, ns, "bob", scram)
        apply_user(tb, ns, "carol", {**scram, "authentication": {"type": "tls"}})
        await runtime.reconcile()
        controller = runtime.controller
        assert {"alice", "bob"} <= set(controller.cluster.scram)
        assert finalizers(tb, ns, "user", "alice") == [], "the operator puts no finalizer on a User"
        record = parse(tb.kubectl_json("get", "configmap", users_record("c"), "-n", ns))
        assert record["alice"].principal == "User:alice" and record["alice"].scram
        assert record["carol"].principal == "User:CN=carol" and not record["carol"].scram

        # A User whose authentication changes loses what the old one had: SCRAM, its principal's ACLs.
        apply_user(tb, ns, "bob", {**scram, "authentication": {"type": "tls"}})
        runtime.cache.expire()
        await runtime.reconcile()
        assert "bob" not in controller.cluster.scram
        assert {a.principal for a in controller.cluster.acls if "bob" in a.principal} == {"User:CN=bob"}
        assert [q.entity for q in controller.cluster.quotas if "bob" in str(q.entity)] == [{"user": "CN=bob"}]

        # Deleted while no operator runs (the runtime stops before the deletion).
        tb.kubectl("delete", "user", "alice", "-n", ns)

    async def second_run(runtime: ClusterRuntime, tb: Testbed, ns: str) -> None:
        controller = runtime.controller
        assert "alice" in controller.cluster.scram, "the credential outlived the User while no operator ran"
        await register(runtime, 0)
        await runtime.reconcile()
        assert "alice" not in controller.cluster.scram
        assert not [a for a in controller.cluster.acls if a.principal == "User:alice"]
        assert not [q for q in controller.cluster.quotas if q.entity == {"user": "alice"}]
        assert "CN=carol" in str([a.principal for a in controller.cluster.acls])
        record = parse(tb.kubectl_json("get", "configmap", users_record("c"), "-n", ns))
        assert sorted(record) == ["bob", "carol"]
        await runtime.recorder.flush()
        assert any("User alice was deleted" in m for m in events(tb, ns, "UserRevoked"))

    with_runtime(apiserver, namespace, uid, first_run)
    with_runtime(apiserver, namespace, uid, second_run)


def test_an_earlier_versions_user_finalizer_comes_off_and_its_deletion_is_done(apiserver: Testbed, namespace: str):
    uid = create_cluster(apiserver, namespace, {**SECURED, "config": NO_FENCING})

    async def check(runtime: ClusterRuntime, tb: Testbed, ns: str) -> None:
        await register(runtime, 0)
        for name in ("old", "kept"):
            apply_user(tb, ns, name, {"authentication": {"type": "scram-sha-512"}})
        await runtime.reconcile()
        # As an earlier version left them: its finalizer on, no record of them.
        for name in ("old", "kept"):
            tb.kubectl("patch", "user", name, "-n", ns, "--type=merge", "-p",
                       '{"metadata":{"finalizers":["dm.dev/user"]}}')
        tb.kubectl("delete", "configmap", users_record("c"), "-n", ns)
        runtime.users.record._users = None
        tb.kubectl("delete", "user", "old", "-n", ns, "--wait=false")
        runtime.cache.expire()
        await runtime.reconcile()
        assert "old" not in runtime.controller.cluster.scram and "kept" in runtime.controller.cluster.scram
        assert tb.kubectl("get", "user", "old", "-n", ns, check=False).returncode != 0
        assert finalizers(tb, ns, "user", "kept") == []

    with_runtime(apiserver, namespace, uid, check)
