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
    reconcile_interval_s: float = 5.0
    broker_grace_period_s: int = 60
    manage_crds: bool = True

    @classmethod
    def from_env(cls) -> OperatorSettings:
        values: dict[str, object] = {}
        namespaces = os.environ.get("DM_WATCH_NAMESPACES", "").strip()
        if namespaces:
            values["namespaces"] = [n.strip() for n in namespaces.split(",") if n.strip()]
        for env, field in (("DM_CONTROLLER_URL", "controller_url"), ("DM_IMAGE", "image"),
                           ("DM_CLUSTER_DOMAIN", "cluster_domain"), ("DM_OPERATOR_PORT", "port"),
                           ("DM_MANAGE_CRDS", "manage_crds"),
                           ("DM_RECONCILE_INTERVAL", "reconcile_interval_s")):
            if os.environ.get(env):
                values[field] = os.environ[env]
        return cls.model_validate(values)
