"""The operator's own settings (environment variables, set by the Helm chart)."""

from __future__ import annotations

import os

from pydantic import BaseModel, Field


class OperatorSettings(BaseModel):
    namespaces: list[str] = Field(default_factory=list, description="Namespaces to watch; empty: all")
    controller_url: str = Field("http://dm-operator.dm-system.svc.cluster.local:9990",
                                description="Where brokers reach this operator's controller API")
    image: str = Field("ghcr.io/dm-dev/dm:0.1.0", description="Broker image when a DMCluster names none")
    cluster_domain: str = "cluster.local"
    port: int = 9990
    # Secured clusters' brokers reach the controller API over TLS here (controller_tls.py)
    tls_port: int = 9991
    controller_tls_url: str = Field("https://dm-operator.dm-system.svc.cluster.local:9991",
                                    description="Where brokers of secured clusters reach the controller API over TLS")
    reconcile_interval_s: float = 5.0
    # As Strimzi's: a broker's clean stop (a controlled shutdown bounded at 10 s, then closing its logs) fits, and
    # the namespace controller re-checks a namespace being deleted after half its pods' longest grace + 1 s, so
    # 60 s held a deleted namespace for 44-60 s after its brokers had stopped (issue 66); 30 s: 20-30 s.
    broker_grace_period_s: int = 30
    manage_crds: bool = True
    image_pull_secrets: list[str] = Field(default_factory=list, description="Secrets brokers pull their image "
                                          "with when a DMCluster names none")
    resync_interval_s: float = Field(300.0, description="How often the watch cache lists everything again")
    # One active instance (ADR 0018): a Lease in the operator's namespace, and the leader label on its pod.
    leader_election: bool = False
    lease_name: str = "dm-operator"
    lease_namespace: str = ""
    pod_name: str = ""
    # client-go's defaults: a standby takes over 15 s after the last renewal it saw; a leader that could
    # not renew for 10 s stops first.
    lease_duration_s: float = 15.0
    lease_renew_deadline_s: float = 10.0
    lease_retry_period_s: float = 2.0

    @classmethod
    def from_env(cls) -> OperatorSettings:
        values: dict[str, object] = {}
        for env, field in (("DM_WATCH_NAMESPACES", "namespaces"), ("DM_IMAGE_PULL_SECRETS", "image_pull_secrets")):
            listed = os.environ.get(env, "").strip()
            if listed:
                values[field] = [n.strip() for n in listed.split(",") if n.strip()]
        for env, field in (("DM_CONTROLLER_URL", "controller_url"), ("DM_IMAGE", "image"),
                           ("DM_CONTROLLER_TLS_URL", "controller_tls_url"), ("DM_OPERATOR_TLS_PORT", "tls_port"),
                           ("DM_CLUSTER_DOMAIN", "cluster_domain"), ("DM_OPERATOR_PORT", "port"),
                           ("DM_MANAGE_CRDS", "manage_crds"), ("DM_LEADER_ELECTION", "leader_election"),
                           ("DM_LEASE_NAME", "lease_name"), ("DM_POD_NAMESPACE", "lease_namespace"),
                           ("DM_POD_NAME", "pod_name"), ("DM_LEASE_DURATION", "lease_duration_s"),
                           ("DM_LEASE_RENEW_DEADLINE", "lease_renew_deadline_s"),
                           ("DM_LEASE_RETRY_PERIOD", "lease_retry_period_s"),
                           ("DM_RECONCILE_INTERVAL", "reconcile_interval_s"),
                           ("DM_RESYNC_INTERVAL", "resync_interval_s"),
                           ("DM_BROKER_GRACE_PERIOD", "broker_grace_period_s")):
            if os.environ.get(env):
                values[field] = os.environ[env]
        settings = cls.model_validate(values)
        if settings.leader_election and not settings.lease_namespace:
            raise ValueError("DM_LEADER_ELECTION needs DM_POD_NAMESPACE (the namespace of the Lease)")
        if not settings.lease_retry_period_s < settings.lease_renew_deadline_s < settings.lease_duration_s:
            raise ValueError("leader election needs DM_LEASE_RETRY_PERIOD < DM_LEASE_RENEW_DEADLINE < "
                             "DM_LEASE_DURATION")
        return settings
