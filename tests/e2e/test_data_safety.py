"""No retained byte is lost on Kubernetes (ADR 0017): a cluster whose state in the resources' status
is wiped while the operator restarts, and a DMCluster deleted (claims kept, the default) and applied
again, come back as the same cluster — cluster id, topic ids, every record, the group's committed
offsets — with nothing deleted; a stray log shows as the DMCluster's StrayData condition until `dm
strays delete`; claims of another release with the same instance label survive a deleteClaim
deletion; a Topic's topicName cannot be edited away from its topic; a broker whose volume belongs to
another cluster refuses to start, and the DMCluster's ClusterIdentity condition says so."""

from __future__ import annotations

import inspect
import textwrap

import pytest
from clients import committed_after_failures
from dm import (
    OPERATOR_NAMESPACE,
    bootstrap,
    broker_pods,
    condition,
    create_cluster,
    dmcluster,
    operator_ready,
    topic,
    wait_cluster_ready,
    wait_topic_ready,
)
from support import apply, get_json, get_or_none, run_script, wait_until

pytestmark = pytest.mark.timeout(900)

PRODUCE = """
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
admin = AdminClient({"bootstrap.servers": b})
admin.create_topics([NewTopic("made.here", 2, 3)])["made.here"].result(30)
p = Producer({"bootstrap.servers": b, "acks": "all", "enable.idempotence": True})
for t in ("keep", "made.here"):
    for i in range(300):
        p.produce(t, key=b"k%d" % i, value=b"%s-%d" % (t.encode(), i))
assert p.flush(60) == 0
c = Consumer({"bootstrap.servers": b, "group.id": "billing", "auto.offset.reset": "earliest",
              "enable.auto.commit": False})
c.subscribe(["keep"])
n = 0
while n < 300:
    m = c.poll(1)
    if m is not None and not m.error():
        n += 1
c.commit(asynchronous=False)
c.close()
print("PRODUCED")
"""

CHECK = """
import time
from confluent_kafka import Consumer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient
admin = AdminClient({"bootstrap.servers": b})
print("CLUSTER", admin.describe_cluster().result(60).cluster_id)
for t in ("keep", "made.here"):
    print("TOPICID", t, admin.describe_topics(TopicCollection([t]))[t].result(60).topic_id)
group = Consumer({"bootstrap.servers": b, "group.id": "billing"})
offsets = committed_after_failures(group, [TopicPartition("keep", p) for p in range(3)], timeout=120)
print("COMMITTED", sum(tp.offset for tp in offsets))
group.close()
for t in ("keep", "made.here"):
    c = Consumer({"bootstrap.servers": b, "group.id": "check-%s-%d" % (t, time.time()),
                  "auto.offset.reset": "earliest"})
    c.subscribe([t])
    got = set()
    deadline = time.time() + 120
    while len(got) < 300 and time.time() < deadline:
        m = c.poll(1)
        if m is not None and not m.error():
            got.add(m.value())
    c.close()
    print("READ", t, len(got))
"""


def facts(sub, ns: str) -> dict[str, str]:
    # the pod has no tests/ tree: the brokers just restarted, so the retry of committed() goes along as source
    script = f"b = {bootstrap(ns)!r}\n" + inspect.getsource(committed_after_failures) + textwrap.dedent(CHECK)
    out = run_script(sub, ns, script, image=sub.image, timeout_s=300)
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] in ("CLUSTER", "COMMITTED"):
            found[parts[0]] = parts[1]
        elif parts and parts[0] in ("TOPICID", "READ"):
            found[f"{parts[0]} {parts[1]}"] = parts[2]
    return found


def strays_in_volumes(sub, ns: str) -> list[str]:
    found = []
    for i in range(3):
        out = sub.kubectl("exec", "-n", ns, f"demo-broker-{i}", "-c", "broker", "--", "dm", "strays", "list",
                          "--data-dir", "/var/lib/dm/data", check=False).stdout
        found += [line.split()[0] for line in out.splitlines() if line.endswith("-stray") or "-stray\t" in line]
    return found


@pytest.mark.e2e_exclusive  # it stops the operator (scaled to 0) for a while
def test_wiped_status_and_a_recreated_dmcluster_keep_every_record(e2e_namespace, operator):
    sub, ns = operator, e2e_namespace
    create_cluster(sub, ns)
    apply(sub, topic("keep", partitions=3, replicas=3, config={"min.insync.replicas": "2"}), ns)
    wait_topic_ready(sub, ns, "keep")
    assert "PRODUCED" in run_script(sub, ns, f"b = {bootstrap(ns)!r}\n" + textwrap.dedent(PRODUCE), image=sub.image,
                                    timeout_s=300)
    before = facts(sub, ns)
    assert before["READ keep"] == "300" and before["READ made.here"] == "300" and before["COMMITTED"] == "300"
    ids = {"keep": get_json(sub, "topic", "keep", "-n", ns)["status"]["topicId"]}

    # A stray log (what a broker keeps aside when no recorded decision allows deleting it) is reported.
    sub.kubectl("exec", "-n", ns, "demo-broker-1", "-c", "broker", "--", "python", "-c",
                "import os; d = '/var/lib/dm/data/ghost-0.deadbeef-stray'; os.makedirs(d); "
                "open(d + '/00000000000000000000.log', 'wb').write(b'x' * 100)")
    stray = wait_until(lambda: (c := condition(get_or_none(sub, "dmcluster", "demo", "-n", ns), "StrayData"))
                       .get("status") == "True" and c, 60, "the StrayData condition")
    assert "broker 1: ghost-0.deadbeef-stray" in stray["message"], stray
    deleted = sub.kubectl("exec", "-n", ns, "demo-broker-1", "-c", "broker", "--", "dm", "strays", "delete",
                          "ghost-0.deadbeef-stray", "--data-dir", "/var/lib/dm/data")
    assert "deleted ghost-0.deadbeef-stray (100 bytes)" in deleted.stdout
    wait_until(lambda: condition(get_or_none(sub, "dmcluster", "demo", "-n", ns), "StrayData").get("status")
               == "False", 60, "StrayData cleared")

    # The cluster document wiped under a running operator: it writes it again from its state.
    resources = [("dmclusters", "demo")] + [("topics", t["metadata"]["name"])
                                             for t in get_json(sub, "topics", "-n", ns)["items"]]
    wipe_status(sub, ns, resources[:1])
    wait_until(lambda: (get_or_none(sub, "dmcluster", "demo", "-n", ns).get("status") or {}).get("clusterId")
               == before["CLUSTER"], 60, "the cluster document written again")

    # Every status wiped while no operator runs (a restore from manifests): recovered from the brokers.
    deployment = ["deployment", "dm-operator", "-n", OPERATOR_NAMESPACE]
    instances = get_json(sub, *deployment)["spec"]["replicas"]
    sub.kubectl("scale", *deployment, "--replicas=0")
    wait_until(lambda: not get_json(sub, "pods", "-n", OPERATOR_NAMESPACE, "-l",
                                    "app.kubernetes.io/component=operator")["items"], 120, "the operator stopped")
    wipe_status(sub, ns, resources)
    assert not (get_json(sub, "dmcluster", "demo", "-n", ns).get("status") or {}).get("clusterId")
    assert not (get_json(sub, "topic", "keep", "-n", ns).get("status") or {}).get("topicId")
    sub.kubectl("scale", *deployment, f"--replicas={instances}")
    wait_until(lambda: operator_ready(sub, OPERATOR_NAMESPACE), 180, "the operator back")
    wait_cluster_ready(sub, ns, timeout_s=300)
    wait_topic_ready(sub, ns, "keep", timeout_s=180)
    after = facts(sub, ns)
    assert after == before, f"after the status was wiped: {after} (before: {before})"
    assert get_json(sub, "dmcluster", "demo", "-n", ns)["status"]["clusterId"] == before["CLUSTER"]
    assert get_json(sub, "topic", "keep", "-n", ns)["status"]["topicId"] == ids["keep"]
    assert not strays_in_volumes(sub, ns)

    # The DMCluster deleted (its claims are kept: deleteClaim false) and applied again.
    sub.kubectl("delete", "dmcluster", "demo", "-n", ns, timeout_s=180)
    wait_until(lambda: not broker_pods(sub, ns), 240, "the brokers gone")
    assert len(get_json(sub, "pvc", "-n", ns)["items"]) == 3, "the claims stay"
    apply(sub, dmcluster(), ns)
    wait_cluster_ready(sub, ns, timeout_s=300)
    wait_topic_ready(sub, ns, "keep", timeout_s=180)
    again = facts(sub, ns)
    assert again == before, f"after the DMCluster was re-created: {again} (before: {before})"
    assert not strays_in_volumes(sub, ns)
    cluster = get_json(sub, "dmcluster", "demo", "-n", ns)
    assert condition(cluster, "StrayData")["status"] == "False"


def wipe_status(sub, ns: str, resources: list[tuple[str, str]]) -> None:
    """Empties the status of each resource through the status subresource (what a restore from
    manifests leaves; kubectl 1.20 cannot patch a subresource)."""
    from kubernetes import client, config

    api = client.CustomObjectsApi(config.new_client_from_config(str(sub.kubeconfig)))
    for kind, name in resources:
        obj = api.get_namespaced_custom_object("dm.dev", "v1alpha1", ns, kind, name)
        obj["status"] = {}
        api.replace_namespaced_custom_object_status("dm.dev", "v1alpha1", ns, kind, name, obj)


def test_claims_of_another_release_survive_and_a_topic_keeps_its_name(e2e_namespace, operator):
    sub, ns = operator, e2e_namespace
    # A claim of something else that carries the same instance label.
    apply(sub, {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "other-release-data", "labels": {"app.kubernetes.io/instance": "solo"}},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}, ns)
    create_cluster(sub, ns, "solo", replicas=1, storage={"size": "1Gi", "deleteClaim": True})
    apply(sub, topic("named", partitions=1, replicas=1, cluster="solo"), ns)
    wait_topic_ready(sub, ns, "named")
    # spec.topicName edited: refused — by the API server's CEL rule where it serves CEL (1.25+), else by
    # the operator (Kubernetes 1.20) — and the topic stays managed.
    edit = sub.kubectl("patch", "topic", "named", "-n", ns, "--type=merge", "-p", '{"spec": {"topicName": "x"}}',
                       check=False)
    if edit.returncode != 0:
        assert "topicName cannot change" in edit.stderr, edit.stderr
    else:
        refused = wait_until(lambda: (c := condition(get_or_none(sub, "topic", "named", "-n", ns)))
                             .get("reason") == "ImmutableFieldChanged" and c, 60, "the rename refused")
        assert "manages topic 'named'" in refused["message"]
    listed = run_script(sub, ns, f"""
        from confluent_kafka.admin import AdminClient
        print("TOPICS", sorted(AdminClient({{"bootstrap.servers": {bootstrap(ns, "solo")!r}}}).list_topics(timeout=30)
                                .topics))
    """, image=sub.image)
    assert "'named'" in listed and "'x'" not in listed
    if edit.returncode == 0:
        sub.kubectl("patch", "topic", "named", "-n", ns, "--type=json", "-p",
                    '[{"op": "remove", "path": "/spec/topicName"}]')
    wait_topic_ready(sub, ns, "named")
    # A volume that belongs to another cluster: the broker refuses it and the DMCluster says so.
    sub.kubectl("exec", "-n", ns, "solo-broker-0", "-c", "broker", "--", "python", "-c",
                "import re; p = '/var/lib/dm/data/meta.properties'; t = open(p).read(); "
                "open(p, 'w').write(re.sub('cluster.id=.*', 'cluster.id=another-cluster', t))")
    sub.kubectl("delete", "pod", "solo-broker-0", "-n", ns)
    refused = wait_until(lambda: (c := condition(get_or_none(sub, "dmcluster", "solo", "-n", ns), "ClusterIdentity"))
                         .get("status") == "False" and c, 180, "the ClusterIdentity condition")
    assert "broker 0" in refused["message"] and "another-cluster" in refused["message"], refused
    assert condition(get_or_none(sub, "dmcluster", "solo", "-n", ns))["status"] == "False"
    # deleteClaim: the cluster's claims go with it, the other release's claim stays.
    sub.kubectl("delete", "dmcluster", "solo", "-n", ns, timeout_s=180)
    wait_until(lambda: [c["metadata"]["name"] for c in get_json(sub, "pvc", "-n", ns)["items"]]
               == ["other-release-data"], 240, "only the other release's claim left")
