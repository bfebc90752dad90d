"""The Helm chart: lint, manifests valid against the Kubernetes schemas and (on the kind cluster's API
server) the CRDs, and the life of a release: install (the operator as a pod under its ServiceAccount,
so RBAC is enforced), helm test, an upgrade that changes the broker config and rolls the brokers one
at a time, and an uninstall that leaves no operator objects and keeps the claims (as configured)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml
from dm import CHART, bootstrap, broker_pods, condition, wait_cluster_ready
from dm_testbed.settings import TestbedSettings
from measurements import note
from substrate import REPO
from support import create_namespace, delete_namespace, get_json, get_or_none, pod_ready, run_script, wait_until

pytestmark = pytest.mark.timeout(900)

VALUE_SETS = {
    "defaults": [],
    "topics": ["--set", "topics[0].name=orders", "--set", "topics[0].partitions=6",
               "--set-string", "topics[0].config.min\\.insync\\.replicas=2"],
    "namespaces": ["--set", "watch.namespaces={team-a,team-b}", "--set", "cluster.enabled=false"],
    "all-namespaces": ["--set", "watch.allNamespaces=true", "--set", "watch.namespaces={team-*}",
                       "--set", "cluster.rack.enabled=true"],
    "http": ["--set", "cluster.http.port=8082", "--set", "cluster.http.authentication=basic"],
    "dashboards": ["--set", "monitoring.dashboards.enabled=true"],
}


def helm_binary() -> str:
    cached = TestbedSettings.from_env().bin_dir / "helm"
    found = str(cached) if cached.exists() else shutil.which("helm")
    if not found:
        pytest.skip("helm is not installed (scripts/helm-install.sh)")
    return found


def render(*args: str) -> str:
    return subprocess.run([helm_binary(), "template", "rel", str(CHART), "-n", "dm", "--include-crds", *args],
                          capture_output=True, text=True, check=True).stdout


def test_chart_lints_and_renders_manifests_valid_for_kubernetes(tmp_path: Path) -> None:
    lint = subprocess.run([helm_binary(), "lint", "--strict", str(CHART)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    validate = shutil.which("kubernetes-validate") or str(Path(REPO / ".venv/bin/kubernetes-validate"))
    for name, args in VALUE_SETS.items():
        out = tmp_path / f"{name}.yaml"
        out.write_text(render(*args))
        kinds = [d["kind"] for d in yaml.safe_load_all(out.read_text()) if d]
        assert "Deployment" in kinds and "CustomResourceDefinition" in kinds
        # The oldest and newest Kubernetes the validator has schemas for; 1.20 itself is checked by
        # the kind cluster's API server (server-side dry run).
        for version in ("1.25.0", "1.37.0"):
            result = subprocess.run([validate, "--strict", "-k", version, "--quiet", str(out)], capture_output=True,
                                    text=True)
            problems = [line for line in result.stdout.splitlines() + result.stderr.splitlines()
                        if line.strip() and "Couldn't find schema for kind" not in line]
            assert not problems, f"{name} on {version}: {problems}"
    bad = subprocess.run([helm_binary(), "template", "rel", str(CHART), "--set", "watch.namespaces={team-*}"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "patterns need watch.allNamespaces=true" in bad.stderr
    schema = subprocess.run([helm_binary(), "template", "rel", str(CHART), "--set", "cluster.replicas=0"],
                            capture_output=True, text=True)
    assert schema.returncode != 0 and "replicas" in schema.stderr, "values.schema.json checks values"


def test_monitoring_objects_where_the_prometheus_operator_is(tmp_path: Path) -> None:
    """PodMonitors and the PrometheusRule (issue 29) only where monitoring.coreos.com/v1 is served: skipped
    silently without it, except the rules asked for by name, which fail with the way round it."""
    wanted = ["--set", "monitoring.podMonitors=true", "--set", "monitoring.prometheusRule=true"]
    docs = [d for d in yaml.safe_load_all(render("--api-versions", "monitoring.coreos.com/v1", *wanted)) if d]
    monitors = {d["metadata"]["name"]: d for d in docs if d["kind"] == "PodMonitor"}
    assert set(monitors) == {"rel-operator-brokers", "rel-operator"}
    assert monitors["rel-operator-brokers"]["spec"]["namespaceSelector"] == {"any": True}
    [rule] = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert rule["spec"] == yaml.safe_load((REPO / "deploy" / "prometheus" / "dm-alerts.yml").read_text())
    plain = [d for d in yaml.safe_load_all(render("--set", "monitoring.podMonitors=true")) if d]
    assert not [d for d in plain if d["kind"] in ("PodMonitor", "PrometheusRule")]
    refused = subprocess.run([helm_binary(), "template", "rel", str(CHART), "--set", "monitoring.prometheusRule=true"],
                             capture_output=True, text=True)
    assert refused.returncode != 0 and "deploy/prometheus/dm-alerts.yml" in refused.stderr
    [operator] = [d for d in plain if d["kind"] == "Deployment"]
    annotations = operator["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/port"] == "9990"
    assert not [d for d in plain if d["kind"] == "ConfigMap" and "grafana_dashboard" in d["metadata"]["labels"]]


def test_dashboards_are_configmaps_for_grafanas_sidecar() -> None:
    docs = [d for d in yaml.safe_load_all(render("--set", "monitoring.dashboards.enabled=true",
                                                 "--set", "monitoring.dashboards.namespace=grafana")) if d]
    maps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"
            and d["metadata"]["labels"].get("grafana_dashboard") == "1"}
    files = sorted((CHART / "files" / "dashboards").glob("*.json"))
    assert len(maps) == len(files) == 6
    for path in files:
        [cm] = [m for m in maps.values() if path.name in m["data"]]
        assert cm["metadata"]["namespace"] == "grafana" and cm["metadata"]["annotations"]["grafana_folder"] == "dm"
        assert json.loads(cm["data"][path.name]) == json.loads(path.read_text())


def test_rendered_objects_pass_the_api_servers_validation(operator) -> None:
    """Server-side dry run: built-in objects against Kubernetes 1.20, DMCluster and Topic against
    the CRDs (installed by the operator fixture's release)."""
    sub = operator
    ns = f"chart-{uuid.uuid4().hex[:6]}"
    watched = [f"{ns}-a", f"{ns}-b"]
    for name in (ns, *watched):
        create_namespace(sub, name)
    value_sets = {**VALUE_SETS, "namespaces": ["--set", f"watch.namespaces={{{','.join(watched)}}}",
                                               "--set", "cluster.enabled=false"]}
    try:
        for name, args in value_sets.items():
            rendered = subprocess.run([helm_binary(), "template", "rel", str(CHART), "-n", ns, *args],
                                      capture_output=True, text=True, check=True).stdout
            docs = [d for d in yaml.safe_load_all(rendered)
                    if d and not (d["metadata"].get("annotations") or {}).get("helm.sh/hook")]
            for doc in docs:  # what helm does: objects without a namespace go to the release's
                if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"):
                    doc["metadata"].setdefault("namespace", ns)
            result = sub.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(docs),
                                 check=False)
            assert result.returncode == 0, f"{name}: {result.stderr}"
        bad = {"apiVersion": "dm.dev/v1alpha1", "kind": "DMCluster", "metadata": {"name": "x", "namespace": ns},
               "spec": {"replicas": 0, "imagePullPolicy": "Sometimes"}}
        result = sub.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(bad), check=False)
        assert result.returncode != 0 and "spec.replicas" in result.stderr and "spec.imagePullPolicy" in result.stderr
    finally:
        for name in (ns, *watched):
            sub.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_install_helm_test_upgrade_and_uninstall(substrate) -> None:
    sub = substrate
    ns = f"chart-{uuid.uuid4().hex[:6]}"
    release = "dmc"
    base = ["-n", ns, "--set", f"image.repository={sub.image_repository}", "--set", f"image.tag={sub.image_tag}",
            "--set", "cluster.storage.size=1Gi", "--set", "topics[0].name=orders",
            "--set", "topics[0].partitions=3"]
    sub.helm("install", release, str(CHART), "--create-namespace", "--wait", "--timeout", "5m", *base)
    try:
        cluster = wait_cluster_ready(sub, ns, release, 3)
        op = get_json(sub, "pods", "-n", ns, "-l", "app.kubernetes.io/component=operator")["items"][0]
        assert op["spec"]["serviceAccountName"] == "dmc-operator"
        wait_until(lambda: condition(get_or_none(sub, "topic", "orders", "-n", ns)).get("status") == "True", 90,
                   "the chart's Topic Ready")
        notes = sub.helm("status", release, "-n", ns).stdout
        assert f"dmc-bootstrap.{ns}.svc.cluster.local:9092" in notes

        tested = sub.helm("test", release, "-n", ns, "--logs", "--timeout", "5m", check=False)
        assert tested.returncode == 0, tested.stdout + tested.stderr
        assert "produced and consumed 100 records" in tested.stdout

        # The operator worked under its ServiceAccount's RBAC: nothing was forbidden. Every form a
        # denial takes in its log says so in words (kopf's APIForbiddenError, the kubernetes
        # client's "Reason: Forbidden", aiohttp's "403, message='Forbidden'"); a bare "403" would
        # also match a timestamp's milliseconds.
        operator_log = sub.kubectl("logs", op["metadata"]["name"], "-n", ns).stdout
        assert "forbidden" not in operator_log.lower(), operator_log[-3000:]

        # An upgrade that changes the broker config rolls the brokers, one at a time.
        before = cluster["status"]["revision"]
        sub.helm("upgrade", release, str(CHART), "--wait", "--timeout", "5m", *base,
                 "--set", "cluster.config.log\\.segment\\.bytes=2097152")
        target = wait_until(lambda: (r := get_or_none(sub, "dmcluster", release, "-n", ns)["status"]["revision"])
                            != before and r, 60, "a new revision after the upgrade")
        most_down = 0
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            pods = broker_pods(sub, ns)
            most_down = max(most_down, 3 - sum(pod_ready(p) for p in pods))
            if len(pods) == 3 and all(pod_ready(p) and p["metadata"]["annotations"]["dm.dev/revision"] == target
                                      for p in pods):
                break
            time.sleep(0.5)
        else:
            pytest.fail("the upgrade's roll did not finish")
        assert most_down <= 1
        cm = get_json(sub, "configmap", f"{release}-config", "-n", ns)
        assert "log.segment.bytes=2097152" in cm["data"]["broker.properties"]
        # Records that must outlive an uninstall and a reinstall of the release (claims kept).
        produced = run_script(sub, ns, KEPT_RECORDS.format(bootstrap=bootstrap(ns, release)), image=sub.image)
        identity = [line for line in produced.splitlines() if line.startswith(("CLUSTER", "TOPICID"))]
    finally:
        sub.helm("uninstall", release, "-n", ns, "--wait", "--timeout", "5m", check=False)
    # Nothing of the operator is left; the claims stay (deleteClaim false), the CRDs too.
    wait_until(lambda: not get_json(sub, "pods", "-n", ns)["items"], 180, "every pod gone")
    for kind in ("deployment", "serviceaccount", "role", "rolebinding", "service", "dmcluster", "topic",
                 "statefulset", "configmap", "job"):
        left = [i["metadata"]["name"] for i in get_json(sub, kind, "-n", ns)["items"]
                if kind != "serviceaccount" or i["metadata"]["name"] != "default"]
        left = [n for n in left if n != "kube-root-ca.crt"]
        assert not left, f"{kind} left after uninstall: {left}"
    cluster_wide = sub.kubectl("get", "clusterrole,clusterrolebinding", "-o", "name").stdout
    assert f"dmc-operator-{ns}" not in cluster_wide
    claims = [c["metadata"]["name"] for c in get_json(sub, "pvc", "-n", ns)["items"]]
    assert sorted(claims) == [f"data-{release}-broker-{i}" for i in range(3)]
    assert sub.kubectl("get", "crd", "dmclusters.dm.dev", check=False).returncode == 0

    # The same release installed again finds its volumes: the same cluster, topic and records.
    sub.helm("install", release, str(CHART), "--wait", "--timeout", "5m", *base)
    try:
        wait_cluster_ready(sub, ns, release, 3, timeout_s=300)
        read = run_script(sub, ns, READ_KEPT.format(bootstrap=bootstrap(ns, release)), image=sub.image, timeout_s=300)
        assert "READ 200" in read, read
        assert [line for line in read.splitlines() if line.startswith(("CLUSTER", "TOPICID"))] == identity
    finally:
        sub.helm("uninstall", release, "-n", ns, "--wait", "--timeout", "5m", check=False)
    sub.kubectl("delete", "namespace", ns, "--wait=false", check=False)


KEPT_RECORDS = """
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import AdminClient
b = "{bootstrap}"
p = Producer({{"bootstrap.servers": b, "acks": "all"}})
for i in range(200):
    p.produce("orders", value=b"kept-%d" % i)
assert p.flush(60) == 0
admin = AdminClient({{"bootstrap.servers": b}})
print("CLUSTER", admin.describe_cluster().result(60).cluster_id)
print("TOPICID", admin.describe_topics(TopicCollection(["orders"]))["orders"].result(60).topic_id)
"""

READ_KEPT = """
import time
from confluent_kafka import Consumer, TopicCollection
from confluent_kafka.admin import AdminClient
b = "{bootstrap}"
admin = AdminClient({{"bootstrap.servers": b}})
print("CLUSTER", admin.describe_cluster().result(60).cluster_id)
print("TOPICID", admin.describe_topics(TopicCollection(["orders"]))["orders"].result(60).topic_id)
c = Consumer({{"bootstrap.servers": b, "group.id": "kept-%d" % time.time(), "auto.offset.reset": "earliest"}})
c.subscribe(["orders"])
got = set()
deadline = time.time() + 120
while len(got) < 200 and time.time() < deadline:
    m = c.poll(1)
    if m is not None and not m.error() and m.value().startswith(b"kept-"):
        got.add(m.value())
c.close()
print("READ", len(got))
"""


def test_the_readme_kubernetes_commands(substrate) -> None:
    """The README's commands, as written (plus a namespace of the test's and, on kind, the image), what
    `kubectl get topics` then prints, and the usual clean-up: `kubectl delete namespace` is done within
    60 s, whatever the order Kubernetes deletes things in (issue 66: the operator's finalizer on a Topic
    held the namespace in Terminating once the operator was gone), and the same release installs again."""
    sub = substrate
    ns = f"readme-{uuid.uuid4().hex[:6]}"
    readme = (REPO / "README.md").read_text()
    assert "helm install dm charts/dm-cluster -n dm --create-namespace --set cluster.name=demo" in readme
    assert "kubectl apply -n dm -f examples/kubernetes/topic.yaml" in readme
    assert "kubectl apply -n dm -f examples/kubernetes/user.yaml" in readme
    assert "kubectl delete namespace dm" in readme
    image = ["--set", f"image.repository={sub.image_repository}", "--set", f"image.tag={sub.image_tag}"]
    install = ["install", "dm", str(CHART), "-n", ns, "--create-namespace", "--set", "cluster.name=demo", *image]
    sub.helm(*install)
    try:
        sub.kubectl("apply", "-n", ns, "-f", str(REPO / "examples" / "kubernetes" / "topic.yaml"))
        sub.kubectl("apply", "-n", ns, "-f", str(REPO / "examples" / "kubernetes" / "user.yaml"))
        wait_cluster_ready(sub, ns, "demo", 3)
        wait_until(lambda: condition(get_or_none(sub, "topic", "orders", "-n", ns)).get("status") == "True", 90,
                   "orders Ready")
        wait_until(lambda: condition(get_or_none(sub, "user", "orders-app", "-n", ns)).get("status") == "True", 90,
                   "the User Ready")
        table = sub.kubectl("get", "topics", "-n", ns).stdout.splitlines()
        assert table[0].split() == ["NAME", "CLUSTER", "PARTITIONS", "REPLICAS", "READY", "UNDER-REPLICATED",
                                    "OFFLINE", "AGE"]
        assert table[1].split()[:7] == ["orders", "demo", "6", "3", "True", "0", "0"]
        for kind, name in (("topic", "orders"), ("user", "orders-app"), ("dmcluster", "demo")):
            assert not get_json(sub, kind, name, "-n", ns)["metadata"].get("finalizers"), f"a finalizer on {kind}"

        took = delete_namespace(sub, ns)
        note(f"kubectl delete namespace (the README's release, a Topic and a User): gone in {took:.1f}s")
        # The release's cluster-scoped RBAC outlives its namespace; installing it again adopts it.
        sub.helm(*install)
        took = delete_namespace(sub, ns)
        note(f"kubectl delete namespace right after installing the release again: gone in {took:.1f}s")
    finally:
        sub.helm("uninstall", "dm", "-n", ns, "--wait", "--timeout", "5m", check=False)
        sub.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        # Cluster-scoped, so a namespace's deletion leaves them (docs/kubernetes.md says so).
        sub.kubectl("delete", "clusterrole,clusterrolebinding", f"dm-operator-{ns}-cluster", check=False)

