"""`dm-operator cleanup`: what the chart's pre-delete hook runs before `helm uninstall` removes the
operator. It deletes the release's DMCluster (its brokers stop while the operator still runs, and its
children go by garbage collection), removes `helm test` pods, and takes off the finalizers earlier
versions of dm put on the cluster's Topics and Users (ADR 0061: this one puts none), so no uninstall
leaves resources that can never be deleted."""

from __future__ import annotations

import asyncio
import logging
import time

from . import GROUP, VERSION
from .kube import Kube
from .topics import release_orphans as release_topics
from .users import release_orphans as release_users

log = logging.getLogger(__name__)


async def cleanup(kube: Kube, namespace: str, cluster: str, timeout_s: float, release: str | None = None) -> int:
    """Returns how many finalizers it took off."""
    if release:
        # `helm test` pods stay for their logs (Helm cannot print the logs of a deleted one); an
        # uninstall takes them along.
        pods = await kube.get(f"/api/v1/namespaces/{namespace}/pods",
                              labelSelector=f"app.kubernetes.io/instance={release},app.kubernetes.io/component=test")
        for pod in pods.get("items", []):
            await kube.delete(f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}")
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/dmclusters/{cluster}"
    await kube.delete(path)
    deadline = time.monotonic() + timeout_s
    while await kube.get_or_none(path) is not None:
        if time.monotonic() > deadline:
            log.warning("DMCluster %s/%s still there after %.0fs (someone else's finalizer?)", namespace, cluster,
                        timeout_s)
            break
        await asyncio.sleep(1)
    released = await release_topics(kube, namespace, cluster) + await release_users(kube, namespace, cluster)
    log.info("DMCluster %s/%s deleted; %d finalizers of an earlier version released", namespace, cluster, released)
    return released
