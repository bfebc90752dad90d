"""The operator keeps its CRDs at its own schema. Helm installs a chart's `crds/` folder on the first
install only and never upgrades it (a well-known pain: new fields are pruned, resources fail to
validate); so on start-up the operator updates the two CRDs when their schema hash is not the one it
generates. It may only update those two (RBAC resourceNames); creating them is the installer's job."""

from __future__ import annotations

import logging

from .crdgen import SCHEMA_ANNOTATION, crd, schema_hash
from .kube import ApiError, Kube
from .models import CRDS

log = logging.getLogger(__name__)
PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class CrdMissing(Exception):
    pass


async def ensure_crds(kube: Kube) -> list[str]:
    """Updates CRDs whose schema differs from this operator's; returns the names it updated."""
    updated = []
    for info in CRDS:
        wanted = crd(info)
        name = wanted["metadata"]["name"]
        current = await kube.get_or_none(f"{PATH}/{name}")
        if current is None:
            raise CrdMissing(f"CRD {name} is not installed: install the chart (or kubectl apply -f crds/) first")
        if (current["metadata"].get("annotations") or {}).get(SCHEMA_ANNOTATION) == schema_hash(info):
            continue
        body = {"metadata": {"annotations": wanted["metadata"]["annotations"],
                             "labels": wanted["metadata"]["labels"],
                             "resourceVersion": current["metadata"]["resourceVersion"]},
                "spec": wanted["spec"]}
        try:
            await kube.patch(f"{PATH}/{name}", body)
        except ApiError as exc:
            if exc.status == 403:
                log.warning("CRD %s differs from this operator's schema but may not be updated (%s); "
                            "apply crds/ from this release", name, exc)
                continue
            raise
        log.info("updated CRD %s to this operator's schema", name)
        updated.append(name)
    return updated
