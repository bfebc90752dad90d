"""The operator's finalizers on Topics and Users: taken off one resource, or off every resource of a
collection whose cluster is gone (or whose namespace is going)."""

from __future__ import annotations

from collections.abc import Callable

from .cache import ObjectCache
from .kube import ApiError, Kube
from .objects import Obj


async def remove(kube: Kube, path: str, obj: Obj, finalizer: str, cache: ObjectCache | None = None) -> None:
    """Takes `finalizer` off the resource (as of the version read: a newer one is left to its next
    event; a refusal is too), and shows the cache the answer."""
    meta = obj["metadata"]
    remaining = [f for f in meta.get("finalizers") or [] if f != finalizer]
    try:
        result = await kube.patch(path, {"metadata": {"finalizers": remaining,
                                                      "resourceVersion": meta["resourceVersion"]}})
    except ApiError:
        return
    if cache is not None:
        cache.observe(result)


async def release_all(kube: Kube, collection: str, finalizer: str, cluster_of: Callable[[Obj], str],
                      cluster: str | None = None) -> int:
    """Removes `finalizer` from the resources of `collection` that belong to `cluster` (every one when
    None); returns how many."""
    listing = await kube.get(collection)
    released = 0
    for obj in listing.get("items", []):
        if finalizer not in (obj["metadata"].get("finalizers") or []):
            continue
        if cluster is not None and cluster_of(obj) != cluster:
            continue
        await remove(kube, f"{collection}/{obj['metadata']['name']}", obj, finalizer)
        released += 1
    return released
