"""The operator's Prometheus metrics (served on /metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry()

RECONCILES = Counter("dm_operator_reconciles", "Reconcile passes", ["kind", "result"], registry=REGISTRY)
RECONCILE_SECONDS = Histogram("dm_operator_reconcile_seconds", "Duration of a DMCluster reconcile pass",
                              registry=REGISTRY, buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
ERRORS = Counter("dm_operator_reconcile_errors", "Reconcile passes that failed", ["kind"], registry=REGISTRY)
ELECTIONS = Counter("dm_controller_leader_elections", "Partition leader changes", ["namespace", "cluster"],
                    registry=REGISTRY)
ISR_CHANGES = Counter("dm_controller_isr_changes", "In-sync replica set changes", ["namespace", "cluster"],
                      registry=REGISTRY)
FENCES = Counter("dm_controller_fences", "Brokers fenced by the operator on pod events", ["namespace", "cluster"],
                 registry=REGISTRY)
OFFLINE = Gauge("dm_controller_offline_partitions", "Partitions without a leader", ["namespace", "cluster"],
                registry=REGISTRY)
UNDER_REPLICATED = Gauge("dm_controller_under_replicated_partitions", "Partitions with an ISR smaller than their "
                         "replicas", ["namespace", "cluster"], registry=REGISTRY)
BROKERS = Gauge("dm_controller_brokers", "Brokers by state", ["namespace", "cluster", "state"], registry=REGISTRY)
CLUSTERS = Gauge("dm_operator_clusters", "DMClusters this operator runs a controller for", registry=REGISTRY)
API_REQUESTS = Counter("dm_operator_api_requests", "Kubernetes API requests the operator made (watches are kopf's "
                       "and not counted)", ["verb", "resource"], registry=REGISTRY)
LEADING = Gauge("dm_operator_leading", "1 while this instance holds the operator Lease and hosts the controllers",
                registry=REGISTRY)
LEADER_EPOCH = Gauge("dm_operator_leader_epoch", "The controller epoch: the operator Lease's leaseTransitions when "
                     "this instance took it (one more each time leadership changes hands; 0 without election)",
                     registry=REGISTRY)
ELECTED = Gauge("dm_operator_elected_timestamp_seconds", "When this instance last became the leader",
                registry=REGISTRY)
BROKERS_ON_LOST_NODES = Gauge("dm_operator_brokers_on_lost_nodes", "Brokers whose pod cannot be scheduled because "
                              "their volume is pinned to a node that no longer exists (ADR 0054)",
                              ["namespace", "cluster"], registry=REGISTRY)
VOLUMES_REPLACED = Counter("dm_operator_volumes_replaced", "Broker volumes replaced by new, empty ones because their "
                           "node was gone (the old ones kept)", ["namespace", "cluster"], registry=REGISTRY)
DRIFT_CORRECTED = Counter("dm_operator_drift_corrections", "Children put back to the desired state after something "
                          "else changed them", ["kind"], registry=REGISTRY)

# Label values known in advance start at zero, so a rate() over them is 0 rather than no series at all
# (dashboards and alerts see "no errors", not "no data").
for _kind in ("DMCluster", "Topic", "User"):
    ERRORS.labels(kind=_kind)
    for _result in ("ok", "error"):
        RECONCILES.labels(kind=_kind, result=_result)
