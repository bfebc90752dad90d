"""The operator's main job, as users meet it: a DMCluster becomes Ready brokers on persistent
volumes spread over the nodes, a Topic shows its partitions' leaders and ISR, clients produce and
consume through the bootstrap Service."""

from __future__ import annotations

from dm import (
    REPO,
    bootstrap,
    condition,
    fully_in_sync,
    leaders,
    topic_status,
    wait_cluster_ready,
    wait_topic_ready,
)
from support import get_json, run_script, wait_until


def test_dmcluster_and_topic_from_the_examples(e2e_namespace, operator):
    sub, ns = operator, e2e_namespace
    sub.kubectl("apply", "-n", ns, "-f", str(REPO / "examples" / "kubernetes" / "dmcluster.yaml"))
    cluster = wait_cluster_ready(sub, ns, "demo", 3)
    pods = get_json(sub, "pods", "-n", ns, "-l", "app.kubernetes.io/instance=demo,app.kubernetes.io/component=broker")
    names = sorted(p["metadata"]["name"] for p in pods["items"])
    assert names == ["demo-broker-0", "demo-broker-1", "demo-broker-2"]
    assert len({p["spec"]["nodeName"] for p in pods["items"]}) == 3, "one broker per node"
    status = cluster["status"]
    assert status["bootstrap"] == bootstrap(ns)
    assert [b["id"] for b in status["brokers"]] == [0, 1, 2]
    assert all(b["ready"] and b["registered"] and not b["fenced"] for b in status["brokers"])
    assert len({b["rack"] for b in status["brokers"]}) == 3, "racks from the nodes' zone labels"
    assert condition(cluster, "ConfigValid")["status"] == "True"
    claims = get_json(sub, "pvc", "-n", ns)["items"]
    assert sorted(c["metadata"]["name"] for c in claims) == [f"data-demo-broker-{i}" for i in range(3)]

    sub.kubectl("apply", "-n", ns, "-f", str(REPO / "examples" / "kubernetes" / "topic.yaml"))
    wait_topic_ready(sub, ns, "orders")
    status = wait_until(lambda: (s := topic_status(sub, ns, "orders")) and fully_in_sync(s) and s, 60,
                        "orders fully in sync")
    assert status["partitionCount"] == 6 and status["replicationFactor"] == 3
    assert status["configs"] == {"min.insync.replicas": "2"}
    assert sorted(leaders(status)) == list(range(6))
    assert set(leaders(status).values()) == {0, 1, 2}, "leaders spread over the brokers"
    racks = {b["id"]: b["rack"] for b in cluster["status"]["brokers"]}
    for p in status["partitions"]:
        assert len({racks[r] for r in p["replicas"]}) == 3, f"partition {p['partition']} spans three zones"
    table = sub.kubectl("get", "topics", "-n", ns).stdout
    assert "orders" in table and "demo" in table and " 6 " in table

    script = f"""
        from confluent_kafka import Consumer, Producer
        b = {bootstrap(ns)!r}
        p = Producer({{"bootstrap.servers": b, "acks": "all", "enable.idempotence": True}})
        for i in range(60):
            p.produce("orders", key=b"k%d" % i, value=b"v%d" % i)
        assert p.flush(60) == 0
        c = Consumer({{"bootstrap.servers": b, "group.id": "e2e", "auto.offset.reset": "earliest"}})
        c.subscribe(["orders"])
        got = set()
        for _ in range(120):
            m = c.poll(1)
            if m is not None and not m.error():
                got.add(m.value())
            if len(got) == 60:
                break
        c.close()
        print("READ", len(got))
    """
    assert "READ 60" in run_script(sub, ns, script, image=sub.image)
