"""dm's Grafana dashboards (issue 29, ADR 0036): the chart's JSON is what dm_broker.tools.dashboards
defines, every panel query is valid PromQL once Grafana's variables are filled in, and it names only
metrics dm exports (docs/metrics.md); the chart makes them ConfigMaps for Grafana's sidecar."""

from __future__ import annotations

import json
from pathlib import Path

import promql_parser
import pytest
from dm_broker.tools import dashboards
from test_alert_rules import SUFFIXES, exported_names

REPO = Path(__file__).resolve().parents[2]
FILES = REPO / "charts" / "dm-cluster" / "files" / "dashboards"


def metric_names(expr: str) -> set[str]:
    names: set[str] = set()

    def visit(node, *_):
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def test_the_charts_json_is_the_code() -> None:
    on_disk = sorted(p.name for p in FILES.glob("*.json"))
    assert on_disk == sorted(f"{d.uid}.json" for d in dashboards.DASHBOARDS)
    for dashboard in dashboards.DASHBOARDS:
        assert (FILES / f"{dashboard.uid}.json").read_text() == dashboards.render(dashboard), \
            "run: python -m dm_broker.tools.dashboards charts/dm-cluster/files/dashboards"


@pytest.mark.parametrize("dashboard", dashboards.DASHBOARDS, ids=lambda d: d.uid)
def test_every_query_is_promql_naming_only_metrics_dm_exports(dashboard) -> None:
    exported = exported_names()
    model = json.loads((FILES / f"{dashboard.uid}.json").read_text())
    queries = [t["expr"] for panel in model["panels"] for t in panel["targets"]]
    queries += [v["definition"].removeprefix("label_values(").split(",")[0]
                for v in model["templating"]["list"] if v["type"] == "query"]
    assert queries
    for expr in queries:
        names = metric_names(dashboards.expanded(expr))  # raises on a syntax error
        assert names, f"{expr} reads no metric"
        for name in names:
            base = next((name.removesuffix(s) for s in SUFFIXES if name.endswith(s)), name)
            assert base in exported or name in exported, f"{dashboard.uid}: {expr} names {name}, not exported by dm"


def test_the_checks_catch_a_broken_query_and_a_metric_dm_does_not_export() -> None:
    with pytest.raises(ValueError):
        promql_parser.parse(dashboards.expanded("sum by (topic) (rate(dm_bytes_in_total[$__rate_interval])"))
    assert metric_names("sum(rate(dm_made_up_total[1m])) / dm_partitions") == {"dm_made_up_total", "dm_partitions"}


def test_panels_do_not_overlap() -> None:
    for dashboard in dashboards.DASHBOARDS:
        cells: set[tuple[int, int]] = set()
        for panel in dashboards.to_grafana(dashboard)["panels"]:
            pos = panel["gridPos"]
            assert pos["x"] + pos["w"] <= 24
            mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
            assert not cells & mine, f"{dashboard.uid}: {panel['title']} overlaps another panel"
            cells |= mine
