"""Renders docs/metrics.md: every metric a broker and the operator export, from their registries (the
names, types, labels and help texts the code defines); a test keeps the page equal to the code.

    python -m dm_broker.tools.metrics_docs > docs/metrics.md
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry


@dataclass(frozen=True)
class MetricDoc:
    name: str  # as exposed (a counter's _total included)
    kind: str
    labels: tuple[str, ...]
    help: str


def _documented(registry: CollectorRegistry) -> Iterator[MetricDoc]:
    for collector in list(registry._collector_to_names):
        describe = getattr(collector, "describe", None)
        families = describe() if describe is not None else collector.collect()
        labels = tuple(getattr(collector, "_labelnames", ()))
        for family in families:
            names = tuple(getattr(family, "_labelnames", ())) or labels \
                or tuple(sorted({k for s in family.samples for k in s.labels if k != "le"}))
            exposed = f"{family.name}_total" if family.type == "counter" else family.name
            yield MetricDoc(exposed, family.type, names, " ".join(family.documentation.split()))


def broker_metrics() -> list[MetricDoc]:
    from ..metrics import BrokerMetrics

    return sorted(_documented(BrokerMetrics(None).registry), key=lambda m: m.name)  # type: ignore[arg-type]


def operator_metrics() -> list[MetricDoc]:
    from dm_operator.metrics import REGISTRY

    return sorted(_documented(REGISTRY), key=lambda m: m.name)


def _table(metrics: list[MetricDoc]) -> list[str]:
    lines = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for m in metrics:
        suffix = " (`_bucket`, `_sum`, `_count`)" if m.kind == "histogram" else ""
        lines.append(f"| `{m.name}`{suffix} | {m.kind} | {', '.join(m.labels)} | {m.help} |")
    return lines


def render() -> str:
    lines = [
        "# Metrics reference",
        "",
        "Generated from the code by `python -m dm_broker.tools.metrics_docs`; a test keeps this page equal to",
        "it, and others check that the alert rules (`deploy/prometheus`) and the Grafana dashboards",
        "(`charts/dm-cluster/files/dashboards`) name only metrics listed here. Brokers serve these on their",
        "side port (`http.port`, `GET /metrics`), the operator on its port 9990.",
        "[Operations](operations.md#monitoring) has the dashboards, how Prometheus finds dm, and the alerts",
        "written on these metrics with what to do when they fire.",
        "",
        "Series labelled `partition` are summed per topic (the label dropped) on a broker with",
        "`metrics.per.partition.enabled=false`, for clusters with many partitions.",
        "",
        "## Broker",
        "",
        *_table(broker_metrics()),
        "",
        "## Operator",
        "",
        "The `dm_controller_*` series are the controller's, which the leading operator instance hosts, one set",
        "per DMCluster (`namespace`, `cluster`).",
        "",
        *_table(operator_metrics()),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
