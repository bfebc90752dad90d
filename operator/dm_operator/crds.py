"""The operator keeps its CRDs at its own schema, moving forward only. Helm installs a chart's `crds/`
folder on the first install and never upgrades it (a well-known pain: new fields are pruned, resources
fail to validate); so on start-up the operator updates the two CRDs to its schema — but only when the
installed schema is older than its own. Each CRD carries its schema version (`dm.dev/schema-version`,
`models.SCHEMA_VERSION`, compared as a version): a rolled-back or older operator finds a newer schema
installed and leaves it alone, so the newer fields its successor wrote are not pruned. The refusal
is logged and shown in every DMCluster's CrdVersion condition.

It may only update those two CRDs (RBAC resourceNames); creating them is the installer's job."""

from __future__ import annotations

import logging

from packaging.version import InvalidVersion, Version

from .crdgen import SCHEMA_ANNOTATION, VERSION_ANNOTATION, crd, schema_hash
from .kube import ApiError, Kube
from .models import CRDS, SCHEMA_VERSION

log = logging.getLogger(__name__)
PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class CrdMissing(Exception):
    pass


def installed_version(current: dict) -> Version:
    """The schema version an installed CRD carries; 0 for one from before versions were recorded."""
    raw = (current["metadata"].get("annotations") or {}).get(VERSION_ANNOTATION, "0")
    try:
        return Version(raw)
    except InvalidVersion:
        return Version("0")


class CrdVersions:
    """What `ensure` did: the CRDs it updated, and why it refused (an older operator than the schema)."""

    def __init__(self) -> None:
        self.updated: list[str] = []
        self.refused = ""

    async def ensure(self, kube: Kube) -> None:
        ours = Version(SCHEMA_VERSION)
        refusals = []
        for info in CRDS:
            wanted = crd(info)
            name = wanted["metadata"]["name"]
            current = await kube.get_or_none(f"{PATH}/{name}")
            if current is None:
                raise CrdMissing(f"CRD {name} is not installed: install the chart (or kubectl apply -f crds/) first")
            theirs = installed_version(current)
            if theirs > ours:
                refusals.append(f"CRD {name} has schema {theirs}, newer than this operator's {ours}: left as it is "
                                "(an older operator never downgrades a schema; upgrade the operator)")
                continue
            same_hash = (current["metadata"].get("annotations") or {}).get(SCHEMA_ANNOTATION) == schema_hash(info)
            if theirs == ours and same_hash:
                continue
            body = {"metadata": {"annotations": wanted["metadata"]["annotations"],
                                 "labels": wanted["metadata"]["labels"],
                                 "resourceVersion": current["metadata"]["resourceVersion"]},
                    "spec": wanted["spec"]}
            try:
                await kube.patch(f"{PATH}/{name}", body)
            except ApiError as exc:
                if exc.status == 403:
                    log.warning("CRD %s has schema %s, older than this operator's %s, but may not be updated (%s); "
                                "apply crds/ from this release", name, theirs, ours, exc)
                    continue
                raise
            log.info("updated CRD %s from schema %s to %s", name, theirs, ours)
            self.updated.append(name)
        self.refused = "; ".join(refusals)
        if self.refused:
            log.warning("%s", self.refused)
