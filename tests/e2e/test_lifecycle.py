"""Changing a running cluster: a rolling restart under load one broker at a time, volumes that grow
(online, and offline with a restart of each broker), scaling up (new brokers take a share of existing
and new partitions), a scale-down that drains brokers first, several clusters under one operator, and a
namespace that is deleted with its clusters and Topics without hanging."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable

import pytest
from dm import (
    OPERATOR_NAMESPACE,
    broker_pods,
    condition,
    create_cluster,
    fully_in_sync,
    start_load,
    topic,
    topic_status,
    verdict,
    wait_cluster_ready,
    wait_topic_ready,
)
from measurements import note
from support import apply, create_namespace, delete_namespace, get_json, get_or_none, pod_ready, run_script, wait_until

pytestmark = pytest.mark.timeout(900)


def follow_roll(sub, ns: str, done: Callable[[list[dict]], bool], what: str) -> tuple[int, bool]:
    """Watches a roll until `done(broker pods)` and the topic "load" is fully in sync: the most brokers
    unavailable at once, and whether the RollingRestart condition showed it."""
    most_unavailable = 0
    rolling_seen = False
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        pods = broker_pods(sub, ns)
        unavailable = 3 - sum(1 for p in pods if pod_ready(p) and not p["metadata"].get("deletionTimestamp"))
        most_unavailable = max(most_unavailable, unavailable)
        rolling_seen |= condition(get_or_none(sub, "dmcluster", "demo", "-n", ns), "RollingRestart")["status"] == "True"
        if len(pods) == 3 and all(pod_ready(p) for p in pods) and done(pods) \
                and fully_in_sync(topic_status(sub, ns, "load")):
            return most_unavailable, rolling_seen
        time.sleep(0.3)
    pytest.fail(f"{what} did not finish in 10 minutes")


def claims(sub, ns: str) -> dict[str, dict]:
    return {c["metadata"]["name"]: c for c in get_json(sub, "pvc", "-n", ns)["items"]}


def test_rolling_restart_under_load_restarts_one_broker_at_a_time(e2e_namespace, operator):
    """A config change rolls the brokers; then their volumes grow on a storage class whose file systems
    grow only when mounted again (the kind testbed's dm-offline-expansion), which rolls them once more."""
    sub, ns = operator, e2e_namespace
    before = create_cluster(sub, ns, storage={"size": "1Gi", "storageClassName": "dm-offline-expansion"}
                            )["status"]["revision"]
    # librdkafka's metadata and leader changes in the consumer's kept log (a few hundred lines): CI once lost
    # sight of a partition here after a restarting broker said the topic did not exist (ADR 0052)
    load = start_load(sub, ns, consumer_env={"CLIENT_CONFIG": json.dumps({"debug": "metadata,topic"})})
    producer, consumer = load.producer, load.consumer

    sub.kubectl("patch", "dmcluster", "demo", "-n", ns, "--type=merge", "-p",
                '{"spec": {"config": {"log.segment.bytes": 1048576}}}')
    target = wait_until(lambda: (r := get_or_none(sub, "dmcluster", "demo", "-n", ns)["status"]["revision"]) != before
                        and r, 60, "a new revision")
    most_unavailable, rolling_seen = follow_roll(
        sub, ns, lambda pods: all(p["metadata"]["annotations"].get("dm.dev/revision") == target for p in pods),
        "the roll")
    assert rolling_seen, "the RollingRestart condition showed the roll"
    assert most_unavailable == 1, f"{most_unavailable} brokers were down at once"
    assert all(p["status"]["containerStatuses"][0]["restartCount"] == 0 for p in broker_pods(sub, ns)), \
        "new pods, not crashed containers"

    # The volumes grow: each claim waits (FileSystemResizePending) until its broker's pod is restarted, one
    # at a time as for a roll, and the load goes on.
    rolled = {p["metadata"]["uid"] for p in broker_pods(sub, ns)}
    sub.kubectl("patch", "dmcluster", "demo", "-n", ns, "--type=merge", "-p", '{"spec": {"storage": {"size": "2Gi"}}}')
    wait_until(lambda: condition(get_or_none(sub, "dmcluster", "demo", "-n", ns), "VolumesExpanded").get("reason")
               == "FileSystemResizePending", 60, "the claims waiting for their brokers' restarts")
    most_unavailable, rolling_seen = follow_roll(
        sub, ns, lambda pods: not {p["metadata"]["uid"] for p in pods} & rolled
        and condition(get_or_none(sub, "dmcluster", "demo", "-n", ns), "VolumesExpanded").get("reason") == "AtSize",
        "the restarts for the grown file systems")
    assert most_unavailable == 1, f"{most_unavailable} brokers were down at once while the file systems grew"
    grown = claims(sub, ns)
    assert sorted(grown) == [f"data-demo-broker-{i}" for i in range(3)], sorted(grown)
    assert {c["status"]["capacity"]["storage"] for c in grown.values()} == {"2Gi"} and not any(
        c["status"].get("conditions") for c in grown.values()), [c["status"] for c in grown.values()]

    time.sleep(3)
    result = verdict(producer.stop(), consumer.stop())
    note(f"[{sub.name}] rolling restart and volume growth under load: {result.summary()}")
    assert result.acked > 500 and result.ok, result.summary()
    events = sub.kubectl("get", "events", "-n", ns, "--field-selector", "involvedObject.kind=DMCluster",
                         "-o", "jsonpath={.items[*].reason}").stdout.split()
    assert events.count("RollingRestart") == 6, events  # three for the revision, three for the file systems
    assert events.count("VolumeExpansion") == 3, events


def replica_sets(sub, ns: str, name: str) -> list[list[int]]:
    return [p["replicas"] for p in topic_status(sub, ns, name).get("partitions", [])]


def test_scale_up_spreads_partitions_and_scale_down_drains_brokers(e2e_namespace, operator):
    sub, ns = operator, e2e_namespace
    create_cluster(sub, ns)
    apply(sub, topic("spread", partitions=6, replicas=2), ns)
    wait_topic_ready(sub, ns, "spread")
    assert all(max(r) <= 2 for r in replica_sets(sub, ns, "spread"))

    # Scale-up: the new brokers get a share of the existing partitions (and of new topics).
    sub.kubectl("scale", "dmcluster/demo", "-n", ns, "--replicas=5")
    cluster = wait_cluster_ready(sub, ns, "demo", 5)
    assert [b["id"] for b in cluster["status"]["brokers"]] == [0, 1, 2, 3, 4]
    wait_until(lambda: {b for r in replica_sets(sub, ns, "spread") for b in r} == {0, 1, 2, 3, 4}
               and not any(p.get("addingReplicas") for p in topic_status(sub, ns, "spread")["partitions"]), 180,
               "existing partitions spread onto brokers 3 and 4")
    wait_topic_ready(sub, ns, "spread")
    counts = Counter(b for r in replica_sets(sub, ns, "spread") for b in r)
    assert max(counts.values()) - min(counts.values()) <= 1, counts
    cluster = wait_until(lambda: (c := get_or_none(sub, "dmcluster", "demo", "-n", ns)) and
                         c["status"].get("balancedBrokers") == 5 and c, 60, "balancedBrokers 5")
    apply(sub, topic("wide", partitions=5, replicas=1), ns)
    wait_topic_ready(sub, ns, "wide")
    assert {r[0] for r in replica_sets(sub, ns, "wide")} == {0, 1, 2, 3, 4}

    # The volumes grow online (the default storage class): every claim, the two a scale-up made from the old
    # template too, with no broker restarted.
    serving = {p["metadata"]["uid"] for p in broker_pods(sub, ns)}
    sub.kubectl("patch", "dmcluster", "demo", "-n", ns, "--type=merge", "-p", '{"spec": {"storage": {"size": "2Gi"}}}')
    wait_until(lambda: (c := condition(get_or_none(sub, "dmcluster", "demo", "-n", ns), "VolumesExpanded"))
               .get("reason") == "AtSize" and "2Gi" in c.get("message", ""), 90, "every volume grown to 2Gi")
    capacities = {name: c["status"]["capacity"]["storage"] for name, c in claims(sub, ns).items()}
    assert capacities == {f"data-demo-broker-{i}": "2Gi" for i in range(5)}, capacities
    assert {p["metadata"]["uid"] for p in broker_pods(sub, ns)} == serving, "no broker restarted"

    # Scale-down: brokers 3 and 4 are drained first, then removed; the topics stay whole.
    sub.kubectl("scale", "dmcluster/demo", "-n", ns, "--replicas=3")
    wait_until(lambda: get_json(sub, "statefulset", "demo-broker", "-n", ns)["spec"]["replicas"] == 3, 240,
               "the StatefulSet scaled down once brokers 3 and 4 were drained")
    for name, partitions in (("spread", 6), ("wide", 5)):
        sets = replica_sets(sub, ns, name)
        assert len(sets) == partitions and all(max(r) <= 2 for r in sets), (name, sets)
        wait_topic_ready(sub, ns, name)
    cluster = wait_until(lambda: (c := get_or_none(sub, "dmcluster", "demo", "-n", ns)) and
                         [b["id"] for b in c["status"]["brokers"]] == [0, 1, 2] and c, 120,
                         "brokers 3 and 4 gone from the status")
    assert condition(cluster, "ScaleDownBlocked")["status"] == "False"
    # Ready again once the three brokers left are all serving (read once, it raced a broker's
    # session being re-established).
    wait_until(lambda: condition(get_or_none(sub, "dmcluster", "demo", "-n", ns)).get("status") == "True", 120,
               "the DMCluster Ready after the scale-down")
    events = sub.kubectl("get", "events", "-n", ns, "--field-selector", "involvedObject.kind=DMCluster",
                         "-o", "jsonpath={.items[*].reason}").stdout.split()
    assert events.count("PartitionsMoving") >= 2, events


def test_several_clusters_and_a_namespace_that_goes_away(operator):
    sub = operator
    ns = f"e2e-{uuid.uuid4().hex[:8]}"
    create_namespace(sub, ns)
    try:
        for name in ("one", "two"):
            apply(sub, {"apiVersion": "dm.dev/v1alpha1", "kind": "DMCluster", "metadata": {"name": name},
                        "spec": {"replicas": 1, "storage": {"size": "1Gi"}}}, ns)
            apply(sub, topic(f"{name}-events", partitions=2, replicas=1, cluster=name), ns)
        apply(sub, {"apiVersion": "dm.dev/v1alpha1", "kind": "User", "metadata": {"name": "app"},
                    "spec": {"cluster": "one", "authentication": {"type": "scram-sha-512"}}}, ns)
        for name in ("one", "two"):
            wait_cluster_ready(sub, ns, name, 1)
            wait_topic_ready(sub, ns, f"{name}-events")
        wait_until(lambda: condition(get_or_none(sub, "user", "app", "-n", ns)).get("status") == "True", 60,
                   "the User Ready")
        record = get_json(sub, "configmap", "one-users", "-n", ns)["data"]["users.json"]
        assert '"principal":"User:app"' in record, record
        metrics = run_script(sub, ns, f"""
            import urllib.request
            url = "http://dm-operator.{OPERATOR_NAMESPACE}.svc.cluster.local:9990/metrics"
            print(urllib.request.urlopen(url, timeout=10).read().decode())
        """, image=sub.image)
        assert "dm_operator_reconciles_total" in metrics and "dm_controller_leader_elections_total" in metrics
        assert f'cluster="one",namespace="{ns}"' in metrics and f'cluster="two",namespace="{ns}"' in metrics
        # The operator lives in its own namespace and keeps running: it sees the deletions of the Topics
        # and the User, which are no decision about them (their namespace goes), and holds nothing.
        took = delete_namespace(sub, ns)
        note(f"kubectl delete namespace (two clusters, Topics, a User; the operator in another): gone in {took:.1f}s")
    finally:
        sub.kubectl("delete", "namespace", ns, "--wait=false", check=False)
