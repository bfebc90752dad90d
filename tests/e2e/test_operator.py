"""The operator's main job, as users meet it: a DMCluster becomes Ready brokers on persistent
volumes spread over the nodes, a Topic shows its partitions' leaders and ISR, clients produce and
consume through the bootstrap Service."""

from __future__ import annotations

import json
import textwrap

from dm import (
    REPO,
    bootstrap,
    broker_pods,
    condition,
    create_cluster,
    fully_in_sync,
    leaders,
    topic,
    topic_status,
    wait_cluster_ready,
    wait_topic_ready,
)
from support import apply, get_json, get_or_none, run_script, wait_until


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

    # The broker runs the image as it was built, as the pod says: PID 1, uid 10001, a read-only root
    # file system, and its data volume writable through the pod's fsGroup.
    proof = sub.kubectl("exec", "-n", ns, "demo-broker-0", "-c", "broker", "--", "python", "-c", textwrap.dedent("""
        import errno, os
        try:
            open("/written-by-the-broker", "w")
            print("root writable")
        except OSError as exc:
            print("root", errno.errorcode[exc.errno])
        data = "/var/lib/dm/data"
        print("uid", os.getuid(), "data gid", os.stat(data).st_gid, "writable", os.access(data, os.W_OK))
        print("pid1", open("/proc/1/cmdline").read().split(chr(0))[1:3])
    """)).stdout
    assert "root EROFS" in proof, proof
    assert "uid 10001 data gid 10001 writable True" in proof, proof
    assert "pid1 ['/opt/dm/bin/dm', 'broker']" in proof, "the broker is the container's PID 1 (gets SIGTERM)"

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


def kafka(sub, ns: str, script: str) -> str:
    """Runs a confluent-kafka script against the cluster `demo` from a pod; `b` is its bootstrap."""
    return run_script(sub, ns, f"b = {bootstrap(ns)!r}\n" + textwrap.dedent(script), image=sub.image)


def topic_names(sub, ns: str) -> dict[str, str]:
    """Kafka topic name -> Topic resource name."""
    items = get_json(sub, "topics", "-n", ns)["items"]
    return {(i.get("status") or {}).get("topicName") or i["spec"].get("topicName") or i["metadata"]["name"]:
            i["metadata"]["name"] for i in items}


def test_topics_grow_refuse_what_they_must_and_follow_the_kafka_api(e2e_namespace, operator):
    sub, ns = operator, e2e_namespace
    create_cluster(sub, ns)
    apply(sub, topic("events", partitions=2, replicas=3), ns)
    wait_topic_ready(sub, ns, "events")

    # Partitions grow, never shrink (reported); the replication factor changes by reassignment.
    sub.kubectl("patch", "topic", "events", "-n", ns, "--type=merge", "-p", '{"spec": {"partitions": 4}}')
    wait_until(lambda: topic_status(sub, ns, "events").get("partitionCount") == 4, 60, "4 partitions")
    wait_topic_ready(sub, ns, "events")
    sub.kubectl("patch", "topic", "events", "-n", ns, "--type=merge", "-p", '{"spec": {"partitions": 2}}')
    refused = wait_until(lambda: (c := condition(get_or_none(sub, "topic", "events", "-n", ns)))
                         .get("reason") == "PartitionDecreaseNotSupported" and c, 60, "a refused decrease")
    assert refused["status"] == "False" and "can only grow" in refused["message"]
    assert topic_status(sub, ns, "events")["partitionCount"] == 4
    for rf in (2, 3):
        sub.kubectl("patch", "topic", "events", "-n", ns, "--type=merge", "-p",
                    json.dumps({"spec": {"partitions": 4, "replicas": rf}}))
        wait_until(lambda rf=rf: (ps := topic_status(sub, ns, "events").get("partitions")) and
                   all(len(p["replicas"]) == rf and len(p["isr"]) == rf and not p.get("addingReplicas")
                       and not p.get("removingReplicas") for p in ps), 120, f"replication factor {rf}")
        wait_topic_ready(sub, ns, "events")

    # Bad Topics: refused by the schema, or a condition; the cluster is not disturbed.
    bad = sub.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(topic("zero", partitions=0)), check=False)
    assert bad.returncode != 0 and "spec.partitions" in bad.stderr
    apply(sub, topic("too-wide", partitions=1, replicas=5), ns)
    wait_until(lambda: condition(get_or_none(sub, "topic", "too-wide", "-n", ns)).get("reason") ==
               "InvalidReplicationFactor", 60, "replicas > brokers reported")
    apply(sub, topic("bad-config", config={"no.such.config": "1"}), ns)
    c = wait_until(lambda: (c := condition(get_or_none(sub, "topic", "bad-config", "-n", ns)))
                   .get("reason") == "InvalidConfig" and c, 60, "an unknown config reported")
    assert "no.such.config" in c["message"]
    apply(sub, topic("orphan", cluster="nowhere"), ns)
    c = wait_until(lambda: (c := condition(get_or_none(sub, "topic", "orphan", "-n", ns)))
                   .get("reason") == "ClusterNotFound" and c, 60, "a Topic for a missing cluster reported")
    assert "nowhere" in c["message"]
    assert condition(get_or_none(sub, "dmcluster", "demo", "-n", ns))["status"] == "True"

    # Topics made through the Kafka API become Topic resources, the internal ones too; deleting
    # either side deletes the topic.
    kafka(sub, ns, """
        from confluent_kafka import Consumer, Producer
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": b})
        admin.create_topics([NewTopic("Made_By.Kafka", 3, 2)])["Made_By.Kafka"].result(30)
        c = Consumer({"bootstrap.servers": b, "group.id": "g"})  # a group: __consumer_offsets
        c.subscribe(["events"]); c.poll(10); c.close()
    """)
    names = wait_until(lambda: (n := topic_names(sub, ns)) and "Made_By.Kafka" in n and "__consumer_offsets" in n
                       and n, 60, "Topic resources for topics created through the Kafka API")
    made = get_json(sub, "topic", names["Made_By.Kafka"], "-n", ns)
    assert made["spec"]["topicName"] == "Made_By.Kafka" and made["spec"]["partitions"] == 3
    assert made["metadata"]["name"] != "Made_By.Kafka"  # not a valid Kubernetes name
    kafka(sub, ns, """
        from confluent_kafka.admin import AdminClient
        admin = AdminClient({"bootstrap.servers": b})  # alive until the future resolves
        admin.delete_topics(["Made_By.Kafka"])["Made_By.Kafka"].result(30)
    """)
    wait_until(lambda: "Made_By.Kafka" not in topic_names(sub, ns), 60, "the resource gone with the topic")
    sub.kubectl("delete", "topic", "events", "-n", ns, "--wait=true", timeout_s=90)
    listed = kafka(sub, ns, """
        from confluent_kafka.admin import AdminClient
        print("TOPICS", sorted(AdminClient({"bootstrap.servers": b}).list_topics(timeout=30).topics))
    """)
    assert "'events'" not in listed.split("TOPICS", 1)[1]


def test_invalid_broker_config_is_reported_and_not_rolled_out(e2e_namespace, operator):
    sub, ns = operator, e2e_namespace
    cluster = create_cluster(sub, ns)
    revision = cluster["status"]["revision"]
    sub.kubectl("patch", "dmcluster", "demo", "-n", ns, "--type=merge", "-p",
                '{"spec": {"config": {"no.such.property": "1", "log.retention.ms": "soon"}}}')
    c = wait_until(lambda: (c := condition(get_or_none(sub, "dmcluster", "demo", "-n", ns), "ConfigValid"))
                   .get("status") == "False" and c, 60, "ConfigValid False")
    assert "no.such.property" in c["message"] and "log.retention.ms" in c["message"]
    obj = get_or_none(sub, "dmcluster", "demo", "-n", ns)
    assert condition(obj)["reason"] == "InvalidConfig"
    assert obj["status"]["revision"] == revision, "an invalid config is not rolled out"
    pods = broker_pods(sub, ns)
    assert all(p["status"]["containerStatuses"][0]["restartCount"] == 0 for p in pods)
    sub.kubectl("patch", "dmcluster", "demo", "-n", ns, "--type=json", "-p",
                '[{"op": "replace", "path": "/spec/config", "value": {}}]')
    wait_until(lambda: condition(get_or_none(sub, "dmcluster", "demo", "-n", ns), "ConfigValid")
               .get("status") == "True", 60, "ConfigValid True again")
