"""The operator's pure parts: CRDs from the models, manifest builders, roll and scale decisions,
topic plans, names, conditions, status round trips."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml
from dm_broker.config import ConfigError
from dm_broker.controller.models import NO_LEADER, PartitionState, TopicDoc
from dm_broker.controller.rebalance import PlanError
from dm_operator import crdgen, manifests, naming
from dm_operator.changes import LeaderChange, describe, leader_changes, leader_events, offline, under_replicated
from dm_operator.conditions import condition, merge_conditions
from dm_operator.models import DMClusterSpec
from dm_operator.planning import (
    BrokerPod,
    TopicRefusal,
    drain_moves,
    next_roll_step,
    plan_topic,
    restart_blocker,
    scale_down_blocker,
    scale_up_moves,
    topic_configs,
)
from dm_operator.settings import OperatorSettings
from dm_operator.store import doc_from_status, topic_status
from pydantic import ValidationError

REPO = Path(__file__).resolve().parents[2]


def doc(name: str, *parts: tuple[list[int], int, list[int]], configs: dict | None = None) -> TopicDoc:
    return TopicDoc(name=name, configs=configs or {},
                    partitions=[PartitionState(replicas=r, leader=leader, isr=isr) for r, leader, isr in parts])


# -- CRDs ------------------------------------------------------------------------------------------


def test_crd_files_are_generated_from_the_models():
    for directory in crdgen.CRD_DIRS:
        for name, text in crdgen.files().items():
            assert (directory / name).read_text() == text, f"run: python -m dm_operator.crdgen ({directory / name})"


# The keywords of Kubernetes' JSONSchemaProps (apiextensions.k8s.io/v1); anything else (`const`, `title`, ...)
# is refused by schema validators and by newer API servers.
KUBERNETES_SCHEMA_KEYWORDS = {
    "description", "type", "format", "default", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
    "maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems", "multipleOf", "enum",
    "maxProperties", "minProperties", "required", "items", "allOf", "oneOf", "not", "properties",
    "additionalProperties", "nullable", "example", "externalDocs"}


def _walk(node, path="spec"):
    if isinstance(node, dict):
        assert "$ref" not in node and "anyOf" not in node, path
        unknown = {k for k in node if not k.startswith("x-kubernetes-")} - KUBERNETES_SCHEMA_KEYWORDS
        assert path.endswith(".properties") or not unknown, f"{path}: {unknown} are not Kubernetes schema keywords"
        if "properties" in node or "items" in node or "additionalProperties" in node:
            assert node.get("type") in ("object", "array"), path
        elif path.split(".")[-1] not in ("properties", "additionalProperties"):
            assert node.get("type") or node.get("x-kubernetes-int-or-string") or \
                node.get("x-kubernetes-preserve-unknown-fields"), f"{path} has no type"
        for key, value in node.items():
            if key in ("properties",):
                for name, child in value.items():
                    _walk(child, f"{path}.{name}")
            elif key in ("items", "additionalProperties") and isinstance(value, dict):
                _walk(value, f"{path}[]")


def test_every_schema_change_raises_the_schema_version():
    # An operator only replaces a CRD whose version is older than its own (crds.py): a changed schema
    # under an unchanged version would leave clusters on whichever schema was installed first.
    import itertools

    from dm_operator.models import CRDS, SCHEMA_HISTORY, SCHEMA_VERSION

    current = {info.plural: crdgen.schema_hash(info) for info in CRDS}
    assert SCHEMA_HISTORY[SCHEMA_VERSION] == current, "models changed: raise SCHEMA_VERSION and record the hashes"
    versions = list(SCHEMA_HISTORY)
    assert versions[-1] == SCHEMA_VERSION
    for older, newer in itertools.pairwise(versions):
        assert SCHEMA_HISTORY[older] != SCHEMA_HISTORY[newer], f"{newer} records no schema change"


def test_crds_are_structural_with_defaults_minimums_and_subresources():
    crds = {c["spec"]["names"]["kind"]: c for c in (yaml.safe_load(t) for t in crdgen.files().values())}
    for kind, each in crds.items():
        for part, schema in each["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"].items():
            if isinstance(schema, dict) and "type" in schema:
                _walk(schema, f"{kind}.{part}")
    cluster = crds["DMCluster"]["spec"]["versions"][0]
    spec = cluster["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["replicas"]["default"] == 3 and spec["properties"]["replicas"]["minimum"] == 1
    assert spec["properties"]["imagePullPolicy"]["enum"] == ["Always", "IfNotPresent", "Never"]
    assert spec["properties"]["storage"]["default"] == {}  # so its own defaults apply
    assert spec["properties"]["config"]["additionalProperties"] == {"x-kubernetes-preserve-unknown-fields": True}
    assert cluster["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"
    assert "status" in cluster["subresources"]
    assert crds["DMCluster"]["spec"]["names"]["shortNames"] == ["dmc"]
    topic = crds["Topic"]["spec"]["versions"][0]
    tspec = topic["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert tspec["required"] == ["cluster"] and tspec["properties"]["partitions"]["minimum"] == 1
    columns = {c["name"] for c in topic["additionalPrinterColumns"]}
    assert {"Partitions", "Replicas", "Ready", "Under-replicated", "Offline"} <= columns
    status = topic["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert set(status["partitions"]["items"]["properties"]) >= {"partition", "leader", "replicas", "isr",
                                                                  "leaderEpoch"}


# -- manifests -------------------------------------------------------------------------------------


def test_broker_config_is_validated_with_the_brokers_own_table():
    assert manifests.render_config({"log.retention.ms": 1000, "auto.create.topics.enable": False}) == \
        "auto.create.topics.enable=false\nlog.retention.ms=1000\n"
    with pytest.raises(ConfigError) as bad:
        manifests.render_config({"no.such.thing": 1, "log.retention.ms": "soon", "listener.port": 1,
                                 "num.partitions": {"nested": 1}})
    message = str(bad.value)
    assert "no.such.thing is not a dm broker property" in message
    assert "log.retention.ms" in message and "listener.port is set by the operator" in message
    assert "num.partitions: expected a string, number or boolean" in message


def test_broker_config_is_checked_as_a_whole():
    """What holds between properties is checked on the whole set: a pair valid together is accepted (each
    alone against the other's default was refused), a pair invalid together is refused before any broker
    would crash-loop on it."""
    together = {"socket.request.max.bytes": 50 << 20, "queued.max.request.bytes": 60 << 20}
    assert "queued.max.request.bytes=62914560" in manifests.render_config(together)
    with pytest.raises(ConfigError, match=r"must be at least socket\.request\.max\.bytes"):
        manifests.render_config({"socket.request.max.bytes": 300 << 20, "queued.max.request.bytes": 256 << 20})


def test_statefulset_manifest():
    spec = DMClusterSpec.model_validate({"replicas": 3, "storage": {"size": "5Gi", "storageClassName": "fast"}})
    owner = naming.owner_reference("demo", "uid-1")
    settings = OperatorSettings(controller_url="http://op.sys.svc:9990")
    sts = manifests.statefulset("demo", "ns", owner, spec, settings, replicas=3, properties="")
    assert sts["metadata"]["name"] == "demo-broker" and sts["metadata"]["ownerReferences"] == [owner]
    assert sts["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    pod = sts["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert "--node-id-from-name" in container["args"] and "$(POD_NAME)" in container["args"]
    assert "http://op.sys.svc:9990/clusters/ns/demo" in container["args"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["terminationGracePeriodSeconds"] > 20  # longer than a controlled shutdown
    assert pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert pod["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    claim = sts["spec"]["volumeClaimTemplates"][0]["spec"]
    assert claim["resources"]["requests"]["storage"] == "5Gi" and claim["storageClassName"] == "fast"
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/instance"] == "demo" and labels["app.kubernetes.io/component"] == "broker"

    custom = DMClusterSpec.model_validate({"template": {"affinity": {"nodeAffinity": {}},
                                                        "tolerations": [{"key": "dedicated"}],
                                                        "priorityClassName": "high", "labels": {"team": "a"}},
                                           "rack": {"topologyKey": "example.com/rack"}})
    other = manifests.statefulset("demo", "ns", owner, custom, settings, replicas=3, properties="")["spec"]["template"]
    assert other["spec"]["affinity"] == {"nodeAffinity": {}} and other["spec"]["priorityClassName"] == "high"
    assert other["spec"]["topologySpreadConstraints"][0]["topologyKey"] == "example.com/rack"
    assert other["metadata"]["labels"]["team"] == "a"


def test_pod_template_affinity_and_tolerations_are_checked_as_kubernetes_types():
    """They are preserved objects in the CRD: a typo or a wrong type is an invalid spec naming the field,
    not a StatefulSet the API server refuses on every pass or silently strips."""
    full = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}]}},
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50, "podAffinityTerm": {
                "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "dm"}}}}]}}
    tolerations = [{"key": "dedicated", "operator": "Equal", "value": "dm", "effect": "NoSchedule"},
                   {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]
    spec = DMClusterSpec.model_validate({"template": {"affinity": full, "tolerations": tolerations}})
    assert spec.template.affinity == full and spec.template.tolerations == tolerations  # kept as written

    def refusal(template: dict) -> str:
        with pytest.raises(ValidationError) as refused:
            DMClusterSpec.model_validate({"template": template})
        return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in refused.value.errors())

    assert "nodeAfinity: unknown field" in refusal({"affinity": {"nodeAfinity": {}}})
    assert "podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.topologyKey: " \
           "Field required" in refusal({"affinity": {"podAntiAffinity": {
               "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": {}}]}}})
    assert "[1].tolerationSeconds: Input should be a valid integer" in refusal(
        {"tolerations": [{"operator": "Exists"}, {"key": "a", "tolerationSeconds": "30"}]})
    assert "[0].tolerationSeconds: Input should be a valid integer" in refusal(
        {"tolerations": [{"key": "a", "tolerationSeconds": True}]})
    assert "[0].effect: Input should be a valid string" in refusal({"tolerations": [{"effect": 1}]})
    assert "tolerations.0: Input should be a valid dictionary" in refusal({"tolerations": ["dedicated"]})


def test_revision_changes_with_what_needs_a_restart_only():
    spec = DMClusterSpec()
    base = manifests.revision(spec, "a=1\n", "dm:1")
    assert manifests.revision(spec, "a=1\n", "dm:1") == base
    assert manifests.revision(spec, "a=2\n", "dm:1") != base
    assert manifests.revision(spec, "a=1\n", "dm:2") != base
    assert manifests.revision(spec.model_copy(update={"replicas": 9}), "a=1\n", "dm:1") == base


def test_pdb_and_services():
    owner = naming.owner_reference("demo", "u")
    pdb = manifests.pod_disruption_budget("demo", "ns", owner, "policy/v1beta1")
    assert pdb["apiVersion"] == "policy/v1beta1" and pdb["spec"]["maxUnavailable"] == 1
    headless = manifests.headless_service("demo", "ns", owner)
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    assert manifests.bootstrap_address("demo", "ns", "cluster.local") == "demo-bootstrap.ns.svc.cluster.local:9092"


def test_the_brokers_network_policy_opens_their_listeners_and_keeps_their_http_port_to_scrapers():
    """Issue 65: every pod of the Kubernetes cluster reached the brokers' port 8080, whose /metrics names every
    topic and group."""
    import kubernetes_validate

    owner = naming.owner_reference("demo", "u")
    spec = DMClusterSpec(http={"enabled": True, "port": 8082},
                         listeners=[{"name": "plain", "port": 9092}, {"name": "tls", "port": 9093, "tls": True}])
    policy = manifests.network_policy("demo", "ns", owner, spec)
    kubernetes_validate.validate(policy, "1.30", strict=True)
    clients, http = policy["spec"]["ingress"]
    assert sorted(p["port"] for p in clients["ports"]) == [8082, 9091, 9092, 9093]
    assert "from" not in clients  # anyone: clients inside the cluster or out
    assert http["ports"] == [{"port": 8080, "protocol": "TCP"}]
    assert http["from"] == [{"namespaceSelector": {}, "podSelector": {"matchLabels": {
        "app.kubernetes.io/name": "prometheus"}}}]
    only = DMClusterSpec(networkPolicy={"clientsFrom": [{"namespaceSelector": {"matchLabels": {"team": "a"}}}],
                                        "metricsFrom": []})
    clients, = manifests.network_policy("demo", "ns", owner, only)["spec"]["ingress"]
    assert clients["from"][0] == {"podSelector": {"matchLabels": naming.selector_labels("demo")}}  # each other
    assert clients["from"][1:] == [{"namespaceSelector": {"matchLabels": {"team": "a"}}}]
    with pytest.raises(ValidationError, match="NetworkPolicyPeer"):
        DMClusterSpec(networkPolicy={"metricsFrom": [{}]})


# -- rolling restarts and scaling ------------------------------------------------------------------


def pods(*specs: tuple[int, bool, str]) -> list[BrokerPod]:
    return [BrokerPod(i, ready, rev) for i, ready, rev in specs]


def test_roll_waits_for_ready_brokers_in_every_isr_and_min_isr():
    topics = {"t": doc("t", ([0, 1, 2], 0, [0, 1, 2]), ([1, 2, 0], 1, [1, 2, 0]), configs={"min.insync.replicas": "2"})}
    done = next_roll_step("new", pods((0, True, "new"), (1, True, "new"), (2, True, "new")), 3, topics, 1)
    assert done.restart is None and done.wait is None and done.outdated == []
    first = next_roll_step("new", pods((0, True, "old"), (1, True, "old"), (2, True, "old")), 3, topics, 1)
    assert first.restart == 0 and first.outdated == [0, 1, 2]
    not_ready = next_roll_step("new", pods((0, False, "new"), (1, True, "old"), (2, True, "old")), 3, topics, 1)
    assert not_ready.restart is None and "broker 0 is not Ready" in not_ready.wait
    lagging = {"t": doc("t", ([0, 1, 2], 1, [1, 2]))}
    waits = next_roll_step("new", pods((0, True, "new"), (1, True, "old"), (2, True, "old")), 3, lagging, 1)
    assert "broker 0 is not back in the ISR of t-0" in waits.wait
    missing = next_roll_step("new", pods((0, True, "new"), (2, True, "old")), 3, topics, 1)
    assert "broker 1's pod is being replaced" in missing.wait
    # An outdated broker that is not serving anyway goes first.
    assert next_roll_step("new", pods((0, True, "old"), (1, False, "old"), (2, True, "old")), 3, topics, 1).restart == 1


def test_restart_blocked_below_min_insync_but_not_for_single_replicas():
    tight = {"t": doc("t", ([0, 1, 2], 0, [0, 1]), configs={"min.insync.replicas": "2"})}
    assert "t-0 below min.insync.replicas=2" in restart_blocker(tight, 0, 1)
    assert restart_blocker(tight, 2, 1) is None  # not in the ISR: does not count
    single = {"s": doc("s", ([0], 0, [0]), configs={"min.insync.replicas": "1"})}
    assert restart_blocker(single, 0, 1) is None
    step = next_roll_step("new", pods((0, True, "old"), (1, True, "old"), (2, True, "old")), 3,
                          {"t": doc("t", ([0, 1, 2], 0, [0, 1, 2]), configs={"min.insync.replicas": "3"})}, 1)
    assert step.restart is None and "min.insync.replicas=3" in step.wait


def test_scale_down_refused_while_removed_brokers_hold_replicas():
    topics = {"a": doc("a", ([0, 3], 0, [0, 3]), ([1, 4], 1, [1, 4]), ([4, 2], 4, [4, 2]))}
    blocked = scale_down_blocker(topics, 5, 3)
    assert "brokers [3, 4]" in blocked and "broker 4 holds 2 replicas (a-1, a-2)" in blocked
    moves = drain_moves(topics, {b: None for b in range(5)}, 3)
    after = {(m.topic, m.partition): m.after for m in moves}
    assert all(b < 3 for r in after.values() for b in r) and len(after) == 3
    with pytest.raises(PlanError):
        drain_moves({"c": doc("c", ([0, 1, 2], 0, [0, 1, 2]))}, {b: None for b in range(3)}, 2)
    # A staying broker that is down (restarting) would be emptied too: the drain waits for it.
    with pytest.raises(PlanError, match="broker 1 is not serving"):
        drain_moves(topics, {0: None, 2: None, 3: None, 4: None}, 3)
    # A leaving broker that is down is drained all the same.
    gone = drain_moves(topics, {b: None for b in range(4)}, 3)
    assert all(b < 3 for m in gone for b in m.after) and {m.partition for m in gone} == \
        {m.partition for m in moves}
    grown = scale_up_moves({"d": doc("d", *[([i % 2, (i + 1) % 2], i % 2, [0, 1]) for i in range(4)])},
                           {b: None for b in range(4)})
    assert sum(m.copies for m in grown) == 4  # 8 replicas, 2 per broker: 4 land on brokers 2 and 3
    assert scale_down_blocker(topics, 5, 5) is None
    assert scale_down_blocker({"b": doc("b", ([0, 1], 0, [0, 1]))}, 5, 3) is None


# -- topics ----------------------------------------------------------------------------------------


def test_topic_plans():
    current = doc("t", ([0, 1, 2], 0, [0, 1, 2]), ([1, 2, 0], 1, [1, 2, 0]), configs={"retention.ms": "1"})
    assert plan_topic(2, 3, {}, None).create
    grow = plan_topic(4, 3, {"retention.ms": "1"}, current)
    assert grow.add_partitions_to == 4 and grow.configs is None
    assert plan_topic(2, 3, {"retention.ms": "2"}, current).configs == {"retention.ms": "2"}
    with pytest.raises(TopicRefusal) as shrink:
        plan_topic(1, 3, {}, current)
    assert shrink.value.reason == "PartitionDecreaseNotSupported" and "can only grow" in shrink.value.message
    with pytest.raises(TopicRefusal) as rf:
        plan_topic(2, 4, {}, current, racks={0: None, 1: None, 2: None})
    assert rf.value.reason == "NotEnoughBrokers"
    # A replication factor change is a reassignment: down keeps the leader, up spreads over the brokers.
    down = plan_topic(2, 2, {"retention.ms": "1"}, current, racks={0: None, 1: None, 2: None})
    assert down.reassign == {0: [0, 1], 1: [1, 2]}
    single = doc("s", ([0], 0, [0]), ([1], 1, [1]), ([2], 2, [2]), ([0], 0, [0]))
    racks = {0: "a", 1: "a", 2: "b", 3: "b"}
    up = plan_topic(4, 2, {}, single, racks=racks).reassign
    assert all(racks[r[0]] != racks[r[1]] for r in up.values()), up  # the added replica on the other rack
    assert sorted(Counter(b for r in up.values() for b in r).values()) == [2, 2, 2, 2]


def test_topic_configs_take_yaml_scalars():
    assert topic_configs({"min.insync.replicas": 2, "unclean.leader.election.enable": True}) == \
        {"min.insync.replicas": "2", "unclean.leader.election.enable": "true"}
    with pytest.raises(TopicRefusal) as bad:
        topic_configs({"retention.ms": "forever"})
    assert bad.value.reason == "InvalidConfig" and "retention.ms" in bad.value.message


def test_topic_resource_names():
    assert naming.topic_resource_name("orders", "demo") == "orders"
    odd = naming.topic_resource_name("Made_By.Kafka", "demo")
    assert odd.startswith("demo-made-by.kafka-") and odd == naming.topic_resource_name("Made_By.Kafka", "demo")
    assert naming.topic_resource_name("orders", "demo", taken=True).startswith("demo-orders-")
    assert naming.topic_resource_name("__consumer_offsets", "demo").startswith("demo-consumer-offsets-")
    assert naming.broker_id_of("demo-broker-12", "demo") == 12
    assert naming.broker_id_of("demo-broker-x", "demo") is None
    assert naming.broker_id_of("other-broker-1", "demo") is None


def test_leader_changes_and_counts():
    old = doc("t", ([0, 1], 0, [0, 1]), ([1, 0], 1, [1, 0]))
    new = doc("t", ([0, 1], 1, [1]), ([1, 0], 1, [1, 0]), ([0, 1], NO_LEADER, [0]))
    changes = leader_changes(old, new)
    assert [(c.partition, c.old, c.new) for c in changes] == [(0, 0, 1)]
    assert "leader broker 0 -> broker 1" in describe(changes[0])
    assert under_replicated(new) == 2 and offline(new) == 1


def test_many_leader_changes_make_one_event_per_kind():
    few = [LeaderChange(i, 0, 1, 2) for i in range(3)]
    assert [(r, k) for r, _, k in leader_events("t", few)] == [("LeaderElected", "Normal")] * 3
    many = [LeaderChange(i, 0, 1 + i % 2, 2) for i in range(700)] + [LeaderChange(900, 0, NO_LEADER, 2)]
    events = leader_events("t", many)
    assert [(r, k) for r, _, k in events] == [("LeaderElected", "Normal"), ("PartitionOffline", "Warning")]
    assert "700 partitions have new leaders (broker 1: 350, broker 2: 350)" in events[0][1]
    assert events[0][1].endswith("18, 19, ...") and "partition 900: offline" in events[1][1]


def test_conditions_keep_their_transition_time():
    first = merge_conditions([], [condition("Ready", False, "BrokersNotReady", "1/3")], 1)
    again = merge_conditions(first, [condition("Ready", False, "BrokersNotReady", "2/3")], 1)
    assert again[0]["lastTransitionTime"] == first[0]["lastTransitionTime"] and again[0]["message"] == "2/3"
    assert "message" not in condition("X", True, "Ok", "")  # 1.20 reads "" as null


def test_topic_status_round_trip():
    d = doc("t", ([0, 1, 2], 1, [1, 2]), configs={"retention.ms": "5"}).model_copy(update={"version": 7})
    status = topic_status(d, "demo")
    assert status["underReplicatedPartitions"] == 1 and status["partitions"][0]["leader"] == 1
    assert doc_from_status(status) == d
    assert doc_from_status({}) is None


def test_kubernetes_reference_is_generated_from_the_models():
    from dm_operator import refdoc

    assert refdoc.DOC.read_text() == refdoc.update(), "run: python -m dm_operator.refdoc"


def test_merge_patches_remove_what_is_gone():
    from dm_operator.store import with_deletions

    assert with_deletions({"a": "1"}, {"a": "0", "b": "2"}) == {"a": "1", "b": None}
    assert with_deletions({"": {"x": "1"}}, {"": {"x": "0", "y": "2"}, "3": {"z": "1"}}) == \
        {"": {"x": "1", "y": None}, "3": None}


def test_a_refusal_because_the_namespace_is_being_deleted_is_recognised():
    from dm_operator.kube import ApiError

    terminating = ApiError(403, {"message": 'serviceaccounts "demo-broker" is forbidden: unable to create new '
                                            "content in namespace e2e-1 because it is being terminated"}, "POST x")
    assert terminating.namespace_terminating
    assert not ApiError(403, {"message": "forbidden: User cannot create"}, "POST x").namespace_terminating
    assert not ApiError(409, {"message": "because it is being terminated"}, "POST x").namespace_terminating


def test_fields_of_a_newer_schema_are_ignored_not_refused():
    from dm_operator.models import TopicSpec, known_part

    raw = {"replicas": 3, "futureField": 1, "storage": {"size": "1Gi", "futureStorage": True},
           "template": {"labels": {"a": "b"}, "futureTemplate": {}}}
    known, unknown = known_part(DMClusterSpec, raw)
    assert sorted(unknown) == ["spec.futureField", "spec.storage.futureStorage", "spec.template.futureTemplate"]
    assert DMClusterSpec.model_validate(known).storage.size == "1Gi"
    assert known_part(TopicSpec, {"cluster": "c", "x": 1})[1] == ["spec.x"]


def test_broker_pods_say_where_their_metrics_are_and_a_user_may_override() -> None:
    from dm_operator.models import DMClusterSpec
    from dm_operator.settings import OperatorSettings

    sts = manifests.statefulset("demo", "ns", {}, DMClusterSpec(), OperatorSettings(), replicas=3, properties="")
    annotations = sts["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(naming.HTTP_PORT)
    assert annotations["prometheus.io/path"] == "/metrics"
    custom = DMClusterSpec.model_validate({"template": {"annotations": {"prometheus.io/scrape": "false"}}})
    sts = manifests.statefulset("demo", "ns", {}, custom, OperatorSettings(), replicas=3, properties="")
    assert sts["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scrape"] == "false"


def test_the_user_record_names_what_to_revoke_and_reads_back():
    from dm_operator.models import UserSpec
    from dm_operator.user_record import RecordedUser, config_map, parse

    def user(name: str, uid: str, auth: str) -> RecordedUser:
        spec = UserSpec.model_validate({"cluster": "c", "authentication": {"type": auth}})
        return RecordedUser.of({"metadata": {"name": name, "uid": uid}}, spec)

    users = {"bob": user("bob", "u2", "tls"), "alice": user("alice", "u1", "scram-sha-512")}
    assert users["alice"] == RecordedUser(uid="u1", principal="User:alice", username="alice", scram=True)
    assert users["bob"] == RecordedUser(uid="u2", principal="User:CN=bob", username="CN=bob", scram=False)
    owner = naming.owner_reference("c", "cluster-uid")
    cm = config_map("c", "ns", owner, users)
    assert cm["metadata"]["name"] == "c-users" and cm["metadata"]["ownerReferences"] == [owner]
    assert cm["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "dm-operator"
    assert parse(cm) == users and list(parse(cm)) == ["alice", "bob"]  # written in name order
    assert parse(None) == {} and parse({"data": {}}) == {}
