"""dm's alert rules (deploy/prometheus, issue 29): promtool checks them and runs their unit tests, every
alert has a test that fires it and one that does not, every metric they name is one dm exports, and the
chart's PrometheusRule carries the same rules. Also: docs/metrics.md is what the registries define."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "dm-alerts.yml"
TESTS = REPO / "deploy" / "prometheus" / "dm-alerts.test.yml"
CHART_COPY = REPO / "charts" / "dm-cluster" / "files" / "dm-alerts.yml"
SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")


def promtool() -> str:
    found = shutil.which("promtool")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        pytest.fail("promtool is missing though it can be installed: scripts/install-tools.sh (make tools)")
    pytest.skip("promtool is not installed (Debian's prometheus package; scripts/install-tools.sh)")


def alerts() -> dict[str, dict]:
    doc = yaml.safe_load(RULES.read_text())
    return {rule["alert"]: rule for group in doc["groups"] for rule in group["rules"]}


def test_promtool_checks_the_rules_and_runs_their_tests() -> None:
    tool = promtool()
    check = subprocess.run([tool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    run = subprocess.run([tool, "test", "rules", TESTS.name], capture_output=True, text=True, cwd=TESTS.parent)
    assert run.returncode == 0 and "SUCCESS" in run.stdout, run.stdout + run.stderr


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    fired: set[str] = set()
    quiet: set[str] = set()
    for test in yaml.safe_load(TESTS.read_text())["tests"]:
        for case in test.get("alert_rule_test", []):
            (fired if case.get("exp_alerts") else quiet).add(case["alertname"])
    assert set(alerts()) == fired, f"never fired by a test: {set(alerts()) - fired}"
    assert set(alerts()) == quiet, f"never tested quiet: {set(alerts()) - quiet}"
    for name, rule in alerts().items():
        assert {"summary", "description", "runbook_url"} <= set(rule["annotations"]), name
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        anchor = rule["annotations"]["runbook_url"].rsplit("#", 1)[1]
        assert anchor == name.lower(), f"{name}'s runbook is the section named after it"


def exported_names() -> set[str]:
    """Every metric family dm exports, from the broker's and the operator's registries (docs/metrics.md)."""
    from dm_broker.tools.metrics_docs import broker_metrics, operator_metrics

    return {m.name.removesuffix("_total") for m in [*broker_metrics(), *operator_metrics()]}


def test_rules_name_only_metrics_dm_exports() -> None:
    exported = exported_names()
    for name, rule in alerts().items():
        for metric in set(re.findall(r"\b(dm_[a-z0-9_]+)", rule["expr"])):
            base = next((metric.removesuffix(s) for s in SUFFIXES if metric.endswith(s)), metric)
            assert base in exported, f"{name} names {metric}, which dm does not export"


def test_the_charts_prometheus_rule_is_the_same_file() -> None:
    assert CHART_COPY.read_text() == RULES.read_text(), f"cp {RULES.relative_to(REPO)} {CHART_COPY.relative_to(REPO)}"


def test_the_metrics_reference_is_the_code() -> None:
    from dm_broker.tools.metrics_docs import render

    doc = REPO / "docs" / "metrics.md"
    assert doc.read_text() == render(), "run: python -m dm_broker.tools.metrics_docs > docs/metrics.md"
