"""A real Prometheus watching a dm cluster on kind (issue 29): Debian's Prometheus, in a pod, runs
deploy/prometheus/prometheus-kubernetes.yml (brokers and operator found through the cluster's DNS) and
dm's alert rules with short `for:` and intervals. It scrapes every broker and the operator; every
dashboard query returns series from the live cluster (but those about features this cluster does not
use, listed with the reason); a stalled consumer makes the lag alert fire; deleting a broker pod on a
cordoned node makes the under-replicated alert fire, and it resolves once the node is uncordoned and
the broker is back. Prints the time from the deletion
to the alert firing."""

from __future__ import annotations

import json
import re
import time
import urllib.parse

import pytest
import yaml
from dm import (
    ON_CONTROL_PLANE,
    PROMETHEUS_IMAGE,
    Workload,
    bootstrap,
    create_cluster,
    topic,
    wait_topic_ready,
    whole,
)
from dm_broker.tools import dashboards
from measurements import note
from substrate import REPO
from support import apply, get_json, pod_ready, restricted, wait_until

# exclusive: it cordons a node and reads the operator's counters
pytestmark = [pytest.mark.timeout(900), pytest.mark.e2e_exclusive]
PROMETHEUS = REPO / "deploy" / "prometheus"
INTERVAL = "2s"
# Series that exist only where a cluster uses the feature (this one has no TLS, SASL, ACLs or quotas)
# or after an event that may not happen during the test.
OPTIONAL = {
    "dm_certificate_expiry_seconds": "no TLS listener",
    "dm_throttle_time_seconds_total": "no client quota",
    "dm_authentications_total": "no SASL or TLS listener",
    "dm_authorization_denials_total": "no authorizer",
    "dm_connections_refused_total": "no connection limit reached",
    "dm_request_errors_total": "a partition error may not happen",
    "dm_operator_drift_corrections_total": "nothing changes the operator's children",
}


def prometheus_config(ns: str, operator_service: str) -> str:
    config = yaml.safe_load((PROMETHEUS / "prometheus-kubernetes.yml").read_text())
    config["global"] = {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL}
    brokers, operator = config["scrape_configs"]
    brokers["dns_sd_configs"][0].update(names=[f"demo-brokers.{ns}.svc.cluster.local"], refresh_interval="5s")
    operator["dns_sd_configs"][0].update(names=[f"{operator_service}.dm-system.svc.cluster.local"],
                                         refresh_interval="5s")
    return yaml.safe_dump(config)


def fast_rules() -> str:
    """dm's rules, expressions unchanged, with `for:` cut to seconds so a test sees them fire."""
    rules = yaml.safe_load((PROMETHEUS / "dm-alerts.yml").read_text())
    for group in rules["groups"]:
        group["interval"] = INTERVAL
        for rule in group["rules"]:
            rule["for"] = "6s"
    return yaml.safe_dump(rules)


def deploy_prometheus(sub, ns: str) -> str:
    [service] = get_json(sub, "services", "-n", "dm-system", "-l", "app.kubernetes.io/component=operator")["items"]
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "prometheus"},
          "data": {"prometheus.yml": prometheus_config(ns, service["metadata"]["name"]),
                   "dm-alerts.yml": fast_rules()}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "prometheus", "labels": {"app": "prometheus"}},
           "spec": {**ON_CONTROL_PLANE, "containers": [{
               "name": "prometheus", "image": PROMETHEUS_IMAGE,
               "args": ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"],
               "ports": [{"name": "web", "containerPort": 9090}],
               "readinessProbe": {"httpGet": {"path": "/-/ready", "port": 9090}, "periodSeconds": 2},
               "volumeMounts": [
                   {"name": "config", "mountPath": "/etc/prometheus/prometheus.yml", "subPath": "prometheus.yml"},
                   {"name": "config", "mountPath": "/etc/prometheus/rules/dm-alerts.yml",
                    "subPath": "dm-alerts.yml"},
                   {"name": "data", "mountPath": "/prometheus"}]}],
               "volumes": [{"name": "config", "configMap": {"name": "prometheus"}}, {"name": "data", "emptyDir": {}}]}}
    apply(sub, [cm, restricted(pod)], ns)
    wait_until(lambda: pod_ready(get_json(sub, "pod", "prometheus", "-n", ns)), 120, "Prometheus Ready")
    return f"/api/v1/namespaces/{ns}/pods/prometheus:9090/proxy/api/v1"


class Prometheus:
    """Prometheus's HTTP API through the API server's pod proxy (no port-forward, no client in a pod)."""

    def __init__(self, sub, base: str) -> None:
        self.sub, self.base = sub, base

    def get(self, path: str, **params: str) -> dict:
        url = f"{self.base}/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        body = json.loads(self.sub.kubectl("get", "--raw", url).stdout)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        return self.get("query", query=expr)["result"]

    def alert_states(self, name: str) -> set[str]:
        return {a["state"] for a in self.get("alerts")["alerts"] if a["labels"]["alertname"] == name}


def test_prometheus_scrapes_dm_and_its_alerts_fire_and_resolve(e2e_namespace, operator):
    sub, ns = operator, e2e_namespace
    create_cluster(sub, ns)
    apply(sub, topic("watched", partitions=3, replicas=3, config={"min.insync.replicas": "2"}), ns)
    wait_topic_ready(sub, ns, "watched")
    prom = Prometheus(sub, deploy_prometheus(sub, ns))

    def targets_up() -> bool:
        up = {(r["metric"]["job"], r["metric"]["instance"]): r["value"][1] for r in prom.query("up")}
        brokers = [v for (job, _), v in up.items() if job == "dm-brokers"]
        operators = [v for (job, _), v in up.items() if job == "dm-operator"]
        return len(brokers) == 3 and all(v == "1" for v in brokers) and operators == ["1"]

    wait_until(targets_up, 120, "Prometheus scraping three brokers and the operator")

    clients = Workload(sub, ns, "monitored_clients.py", {"BOOTSTRAP": bootstrap(ns), "TOPIC": "watched",
                                                         "GROUP": "stalled", "RATE": 100})
    clients.wait_for("READY", 180)
    wait_until(lambda: "firing" in prom.alert_states("DmConsumerLagGrowing"), 180,
               "the lag alert firing for the stalled group")
    lagging = {a["labels"]["group"]: a for a in prom.get("alerts")["alerts"]
               if a["labels"]["alertname"] == "DmConsumerLagGrowing" and a["state"] == "firing"}
    assert "stalled" in lagging and lagging["stalled"]["labels"]["namespace"] == ns
    assert "stalled-healthy" not in lagging, "the lag alert fired for a consumer that keeps up"

    # A broker pod deleted while its node is cordoned (node maintenance: the pod cannot come back until
    # the node is uncordoned, so the outage outlasts `for:`): the under-replicated alert fires, then
    # resolves once the broker is back.
    assert not prom.alert_states("DmUnderReplicatedPartitions")
    node = get_json(sub, "pod", "demo-broker-1", "-n", ns)["spec"]["nodeName"]
    sub.kubectl("cordon", node)
    try:
        deleted = time.time()
        sub.kubectl("delete", "pod", "demo-broker-1", "-n", ns, "--wait=false")
        wait_until(lambda: "firing" in prom.alert_states("DmUnderReplicatedPartitions"), 180,
                   "the under-replicated alert firing")
        fired_after = time.time() - deleted
    finally:
        sub.kubectl("uncordon", node)
        uncordoned = time.time()

    wait_until(lambda: whole(sub, ns, "watched"), 300, "the broker back and every ISR whole")
    wait_until(lambda: not prom.alert_states("DmUnderReplicatedPartitions"), 120, "the alert resolved")
    resolved_after = time.time() - uncordoned
    # Every dashboard query answers from the live cluster.
    time.sleep(10)  # rate() windows hold samples of the workload since the broker came back
    empty = []
    for dashboard in dashboards.DASHBOARDS:
        for panel in dashboard.panels:
            for query in panel.queries:
                if prom.query(dashboards.expanded(query.expr)):
                    continue
                names = set(re.findall(r"\b((?:dm|process)_[a-z0-9_]+)", query.expr))
                if not names <= set(OPTIONAL):
                    empty.append(f"{dashboard.uid} / {panel.title}: {query.expr}")
    assert not empty, "dashboard queries without series:\n" + "\n".join(empty)

    clients.stop()
    queries = sum(len(p.queries) for d in dashboards.DASHBOARDS for p in d.panels)
    note(f"[e2e monitoring] Debian's Prometheus, scrape and rule interval {INTERVAL}, for: 6s: broker pod deleted "
         f"on a cordoned node -> DmUnderReplicatedPartitions firing after {fired_after:.1f} s; node uncordoned -> "
         f"alert resolved after {resolved_after:.1f} s; a stalled consumer -> DmConsumerLagGrowing firing; "
         f"{queries} dashboard queries answered")
