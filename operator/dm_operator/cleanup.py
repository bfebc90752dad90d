"""`dm-operator cleanup`: what the chart's pre-delete hook runs before `helm uninstall` removes the
operator. It deletes the release's DMCluster and waits for the operator to let its Topics go; an
operator that does not within the timeout has its finalizers released here, so an uninstall never
leaves resources that can never be deleted."""

from __future__ import annotations

import asyncio
import logging
import time

from . import GROUP, VERSION
from .kube import Kube
from .store import TOPIC_FINALIZER
from .topics import release_finalizer

log = logging.getLogger(__name__)


async def cleanup(kube: Kube, namespace: str, cluster: str, timeout_s: float, release: str | None = None) -> int:
    if release:
        # `helm test` pods stay for their logs (Helm cannot print the logs of a deleted one); an
        # uninstall takes them along.
        pods = await kube.get(f"/api/v1/namespaces/{namespace}/pods",
                              labelSelector=f"app.kubernetes.io/instance={release},app.kubernetes.io/component=test")
        for pod in pods.get("items", []):
            await kube.delete(f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}")
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}"
    await kube.delete(f"{base}/dmclusters/{cluster}")
    deadline = time.monotonic() + timeout_s

    async def held() -> list[dict]:
        topics = (await kube.get(f"{base}/topics")).get("items", [])
        return [t for t in topics if t.get("spec", {}).get("cluster") == cluster
                and TOPIC_FINALIZER in (t["metadata"].get("finalizers") or [])]

    while time.monotonic() < deadline:
        if await kube.get_or_none(f"{base}/dmclusters/{cluster}") is None and not await held():
            log.info("DMCluster %s/%s deleted, its Topics released", namespace, cluster)
            return 0
        await asyncio.sleep(1)
    remaining = await held()
    for obj in remaining:
        await release_finalizer(kube, f"{base}/topics/{obj['metadata']['name']}", obj)
    log.warning("the operator did not release %d Topics of %s/%s in %.0fs: released here", len(remaining),
                namespace, cluster, timeout_s)
    return len(remaining)
