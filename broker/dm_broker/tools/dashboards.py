"""dm's Grafana dashboards, defined here as panels and PromQL and written out as Grafana JSON
(`charts/dm-cluster/files/dashboards/`, ADR 0036). A test keeps the JSON equal to this module, parses
every query as PromQL and checks that it names only metrics dm exports; the e2e suite runs every query
against a live cluster; `make dashboards` renders them to PNGs for the docs.

    python -m dm_broker.tools.dashboards charts/dm-cluster/files/dashboards
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

RATE = "$__rate_interval"  # Grafana's window for rate(): at least four scrape intervals
BROKERS = 'instance=~"$instance"'


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    title: str
    queries: tuple[Query, ...]
    unit: str = "short"  # Grafana's unit ids: short, s, bytes, Bps, ops, percentunit
    description: str = ""
    stat: bool = False  # a single figure (stat panel) rather than a time series


@dataclass(frozen=True)
class Variable:
    """A Grafana query variable over one label of one metric (multi-select, "All" by default)."""

    name: str
    metric: str
    label: str


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...]
    variables: tuple[Variable, ...] = field(default=(Variable("instance", "dm_partitions", "instance"),))


def _p(title: str, *queries: tuple[str, str] | str, unit: str = "short", description: str = "",
       stat: bool = False) -> Panel:
    return Panel(title, tuple(Query(q) if isinstance(q, str) else Query(*q) for q in queries), unit, description,
                 stat)


def _rate(metric: str, by: str, matcher: str = BROKERS) -> str:
    return f"sum by ({by}) (rate({metric}{{{matcher}}}[{RATE}]))"


def _p99(histogram: str, by: str, matcher: str = BROKERS) -> str:
    return f"histogram_quantile(0.99, sum by (le, {by}) (rate({histogram}_bucket{{{matcher}}}[{RATE}])))"


OVERVIEW = Dashboard("dm-overview", "dm / Cluster overview",
                     "Whether the cluster is whole and what flows through it.", (
    _p("Brokers reporting", "count(dm_partitions)", stat=True),
    _p("Offline partitions", "max(dm_offline_partitions) or vector(0)", stat=True,
       description="Partitions without a leader: nobody can read or write them."),
    _p("Under-replicated partitions", "sum(dm_under_replicated_partitions) or vector(0)", stat=True),
    _p("Under min ISR", "sum(dm_under_min_isr_partitions) or vector(0)", stat=True,
       description="acks=all writes to these partitions are refused."),
    _p("Records in", ("sum(rate(dm_messages_in_total[$__rate_interval]))", "records/s"), unit="ops"),
    _p("Bytes in and out", ("sum(rate(dm_bytes_in_total[$__rate_interval]))", "in"),
       ("sum(rate(dm_bytes_out_total[$__rate_interval]))", "out to consumers"),
       ("sum(rate(dm_replication_bytes_out_total[$__rate_interval]))", "out to followers"), unit="Bps"),
    _p("Consumer lag by group", ("sum by (group) (dm_group_lag)", "{{group}}")),
    _p("Leaders per broker", ("sum by (instance) (dm_leader_partitions)", "{{instance}}")),
    _p("Controller unreachable", ("max by (instance) (dm_controller_unreachable_seconds)", "{{instance}}"),
       unit="s", description="How long each broker has not reached the controller (0: it answers)."),
    _p("Disk free", ("min by (instance) (dm_log_dir_free_bytes / dm_log_dir_total_bytes)", "{{instance}}"),
       unit="percentunit"),
), variables=())

BROKER_VIEW = Dashboard("dm-brokers", "dm / Brokers", "Requests, latency, the event loop and resources per broker.", (
    _p("Requests by API", (_rate("dm_request_duration_seconds_count", "api"), "{{api}}"), unit="reqps"),
    _p("p99 latency by API", (_p99("dm_request_duration_seconds", "api"), "{{api}}"), unit="s"),
    _p("Partition errors by API", (_rate("dm_request_errors_total", "api, error"), "{{api}} {{error}}"),
       unit="ops"),
    _p("Event loop lag p99", (_p99("dm_event_loop_lag_seconds", "instance"), "{{instance}}"), unit="s",
       description="How late a 50 ms timer fires: time the loop spent on something else."),
    _p("Event loop stalls by cause", (_rate("dm_event_loop_stalls_total", "instance, cause"), "{{instance}} {{cause}}"),
       unit="ops", description="Loop probes late by over 100 ms per second, by cause: busy (the broker's own work "
       "on the loop), run_queue (waiting for a CPU), other_thread (another broker thread holding the CPU), blocked "
       "(a blocking call). docs/operations.md says what to do for each."),
    _p("CPU", (f"sum by (instance) (rate(process_cpu_seconds_total{{{BROKERS}}}[{RATE}]))", "{{instance}}"),
       unit="percentunit"),
    _p("Resident memory", (f"process_resident_memory_bytes{{{BROKERS}}}", "{{instance}}"), unit="bytes"),
    _p("Connections", (f"dm_active_connections{{{BROKERS}}}", "{{instance}}"),
       (_rate("dm_connections_refused_total", "instance"), "refused/s {{instance}}")),
    _p("Authentication", (_rate("dm_authentications_total", "listener, mechanism, result"),
                          "{{listener}} {{mechanism}} {{result}}"),
       (_rate("dm_authorization_denials_total", "api"), "denied {{api}}"), unit="ops"),
    _p("Partitions and leaders", (f"dm_partitions{{{BROKERS}}}", "replicas {{instance}}"),
       (f"dm_leader_partitions{{{BROKERS}}}", "leads {{instance}}")),
    _p("ISR shrinks and expansions", (_rate("dm_isr_shrinks_total", "instance"), "shrinks {{instance}}"),
       (_rate("dm_isr_expands_total", "instance"), "expands {{instance}}"), unit="ops"),
    _p("Log directory free", (f"dm_log_dir_free_bytes{{{BROKERS}}}", "{{instance}} {{dir}}"), unit="bytes"),
    _p("Certificate expiry", (f"dm_certificate_expiry_seconds{{{BROKERS}}}", "{{instance}} {{listener}}"),
       unit="s", description="Seconds until each TLS listener's certificate expires (no series: no TLS)."),
    _p("Client quota throttling", (_rate("dm_throttle_time_seconds_total", "quota, user, client_id"),
                                   "{{quota}} {{user}} {{client_id}}"), unit="percentunit"),
    _p("Fetch sessions", (f"dm_fetch_sessions{{{BROKERS}}}", "{{instance}}")),
))

TOPIC_MATCH = 'topic=~"$topic"'
TOPIC_VIEW = Dashboard("dm-topics", "dm / Topics and partitions", "Traffic and size per topic.", (
    _p("Records in by topic", (_rate("dm_messages_in_total", "topic", TOPIC_MATCH), "{{topic}}"), unit="ops"),
    _p("Bytes in by topic", (_rate("dm_bytes_in_total", "topic", TOPIC_MATCH), "{{topic}}"), unit="Bps"),
    _p("Bytes out by topic", (_rate("dm_bytes_out_total", "topic", TOPIC_MATCH), "consumers {{topic}}"),
       (_rate("dm_replication_bytes_out_total", "topic", TOPIC_MATCH), "followers {{topic}}"), unit="Bps"),
    _p("Log size by topic (all replicas)", (f"sum by (topic) (dm_log_size_bytes{{{TOPIC_MATCH}}})", "{{topic}}"),
       unit="bytes"),
    _p("Log end offset growth", (f"sum by (topic) (deriv(dm_log_end_offset{{{TOPIC_MATCH}}}[{RATE}]))", "{{topic}}"),
       unit="ops", description="Offsets appended per second on each replica of the topic, summed."),
    _p("Unstable offsets", (f"sum by (topic) (dm_unstable_offsets{{{TOPIC_MATCH}}})", "{{topic}}"),
       description="Offsets read_committed consumers wait for, behind open transactions."),
), variables=(Variable("topic", "dm_log_end_offset", "topic"),))

GROUP_MATCH = 'group=~"$group"'
GROUP_VIEW = Dashboard("dm-groups", "dm / Consumer groups and lag", "How far each group is behind, and its members.", (
    _p("Lag by group", (f"sum by (group) (dm_group_lag{{{GROUP_MATCH}}})", "{{group}}")),
    _p("Lag by group and topic", (f"sum by (group, topic) (dm_group_lag{{{GROUP_MATCH}}})", "{{group}} {{topic}}")),
    _p("Lag growth", (f"sum by (group) (deriv(dm_group_lag{{{GROUP_MATCH}}}[{RATE}]))", "{{group}}"), unit="ops",
       description="Positive: the group falls further behind."),
    _p("Members", (f"sum by (group, state) (dm_group_members{{{GROUP_MATCH}}})", "{{group}} {{state}}")),
    _p("Rebalances", (f"sum by (group) (changes(dm_group_generation{{{GROUP_MATCH}}}[{RATE}]))", "{{group}}"),
       description="Generation changes in the window."),
    _p("Offset commits", (_rate("dm_request_duration_seconds_count", "instance", 'api="OffsetCommit"'),
                          "{{instance}}"), unit="reqps"),
), variables=(Variable("group", "dm_group_members", "group"),))

TXN_VIEW = Dashboard("dm-transactions", "dm / Transactions", "Transactional ids, open transactions and their cost.", (
    _p("Transactional ids by state", ("sum by (state) (dm_transactions)", "{{state}}")),
    _p("Oldest open transaction", ("max by (instance) (dm_transaction_oldest_open_seconds)", "{{instance}}"),
       unit="s", description="A transaction open much longer than its timeout is stuck."),
    _p("Unstable offsets", ("sum by (topic) (dm_unstable_offsets)", "{{topic}}")),
    _p("Transaction requests", (_rate("dm_request_duration_seconds_count", "api",
                                      'api=~"InitProducerId|AddPartitionsToTxn|AddOffsetsToTxn|EndTxn|TxnOffsetCommit"'),
                                "{{api}}"), unit="reqps"),
), variables=())

OPERATOR_VIEW = Dashboard("dm-operator", "dm / Operator", "The kopf operator and the controllers it hosts.", (
    _p("Leading instance", ("max by (instance) (dm_operator_leading)", "{{instance}}"),
       description="1 on the instance that holds the Lease and runs the controllers."),
    _p("Controller epoch", ("max(dm_operator_leader_epoch)", "epoch"),
       description="One more each time operator leadership (and so the controllers) changed hands."),
    _p("Reconciles", ("sum by (kind, result) (rate(dm_operator_reconciles_total[$__rate_interval]))",
                      "{{kind}} {{result}}"), unit="ops"),
    _p("Reconcile errors", ("sum by (kind) (rate(dm_operator_reconcile_errors_total[$__rate_interval]))", "{{kind}}"),
       unit="ops"),
    _p("Reconcile p99", (_p99("dm_operator_reconcile_seconds", "instance", ""), "{{instance}}"), unit="s"),
    _p("Drift corrections", ("sum by (kind) (increase(dm_operator_drift_corrections_total[$__rate_interval]))",
                             "{{kind}}")),
    _p("Brokers by state", ("sum by (cluster, state) (dm_controller_brokers)", "{{cluster}} {{state}}")),
    _p("Leader elections and ISR changes",
       ("sum by (cluster) (increase(dm_controller_leader_elections_total[$__rate_interval]))", "elections {{cluster}}"),
       ("sum by (cluster) (increase(dm_controller_isr_changes_total[$__rate_interval]))", "ISR {{cluster}}")),
    _p("Partitions offline or under-replicated",
       ("sum by (cluster) (dm_controller_offline_partitions)", "offline {{cluster}}"),
       ("sum by (cluster) (dm_controller_under_replicated_partitions)", "under-replicated {{cluster}}")),
    _p("Kubernetes API requests", ("sum by (verb, resource) (rate(dm_operator_api_requests_total[$__rate_interval]))",
                                   "{{verb}} {{resource}}"), unit="reqps"),
), variables=())

DASHBOARDS = (OVERVIEW, BROKER_VIEW, TOPIC_VIEW, GROUP_VIEW, TXN_VIEW, OPERATOR_VIEW)


def expanded(expr: str, rate_interval: str = "30s") -> str:
    """A panel query as Grafana sends it to Prometheus with every variable at "All" (`.*`) and
    `$__rate_interval` at `rate_interval` (the tests, the e2e suite and bench.dashboards run them so)."""
    return re.sub(r"\$(\w+)", lambda m: rate_interval if m.group(1) == "__rate_interval" else ".*", expr)


def _variable_json(variable: Variable) -> dict:
    query = f"label_values({variable.metric}, {variable.label})"
    return {"name": variable.name, "label": variable.name, "type": "query", "datasource": {"uid": "${datasource}"},
            "query": {"query": query, "refId": variable.name}, "definition": query, "refresh": 2,
            "multi": True, "includeAll": True, "allValue": ".*", "current": {"text": "All", "value": "$__all"},
            "sort": 1}


def _panel_json(panel: Panel, panel_id: int, x: int, y: int, width: int, height: int) -> dict:
    targets = [{"refId": chr(ord("A") + i), "expr": q.expr, "legendFormat": q.legend or "__auto",
                "datasource": {"uid": "${datasource}"}} for i, q in enumerate(panel.queries)]
    kind = "stat" if panel.stat else "timeseries"
    out = {"id": panel_id, "type": kind, "title": panel.title, "description": panel.description,
           "datasource": {"uid": "${datasource}"}, "gridPos": {"x": x, "y": y, "w": width, "h": height},
           "targets": targets, "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []}}
    if panel.stat:
        out["options"] = {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value", "graphMode": "none"}
    else:
        out["options"] = {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}}
    return out


def to_grafana(dashboard: Dashboard) -> dict:
    """The dashboard as Grafana's JSON model: stat panels four to a row, time series two to a row."""
    panels, x, y, previous_height = [], 0, 0, 0
    for number, panel in enumerate(dashboard.panels, start=1):
        width, height = (6, 4) if panel.stat else (12, 8)
        if x + width > 24:
            x, y = 0, y + previous_height
        panels.append(_panel_json(panel, number, x, y, width, height))
        x, previous_height = x + width, height
    datasource = {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
                  "current": {}, "hide": 0}
    return {
        "uid": dashboard.uid, "title": dashboard.title, "description": dashboard.description,
        "tags": ["dm"], "schemaVersion": 39, "version": 1, "editable": True, "timezone": "browser",
        "time": {"from": "now-1h", "to": "now"}, "refresh": "30s",
        "templating": {"list": [datasource, *(_variable_json(v) for v in dashboard.variables)]},
        "panels": panels,
    }


def render(dashboard: Dashboard) -> str:
    return json.dumps(to_grafana(dashboard), indent=2, sort_keys=True) + "\n"


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for dashboard in DASHBOARDS:
        path = directory / f"{dashboard.uid}.json"
        path.write_text(render(dashboard))
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write(Path(sys.argv[1] if len(sys.argv) > 1 else "charts/dm-cluster/files/dashboards")):
        print(path)
