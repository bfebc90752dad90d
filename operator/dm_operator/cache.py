"""What the operator knows of the objects it watches, kept current by watch events (kopf's) and by
the answers to its own writes — the informer pattern — so that a reconcile that changes nothing reads
nothing from the API server, however many Topics a cluster has.

A collection (a kind, a namespace, a label selector) is listed once, the first time it is read; watch
events keep it current from then on, and `expire` makes every collection be listed again (a slow
resync, for whatever a watch could have missed). Versions of one object are ordered by their
resourceVersion where the API server gives numbers, so a late event never replaces a newer answer."""

from __future__ import annotations

import logging
import time

from .kube import Kube, collection_path
from .objects import Obj, labels_of, resource_version

log = logging.getLogger(__name__)
Key = tuple[str, str, str]  # kind, namespace, name
Selector = dict[str, str]
TOMBSTONE_S = 300.0


def matches(obj: Obj, selector: Selector | None) -> bool:
    labels = labels_of(obj)
    return all(labels.get(k) == v for k, v in (selector or {}).items())


def key_of(obj: Obj) -> Key:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace") or "", meta["name"]


class ObjectCache:
    """`watched=False`: nothing feeds it (no watches running, as in tests of one piece), so every read
    goes to the API server."""

    def __init__(self, kube: Kube, watched: bool = True) -> None:
        self.kube = kube
        self.watched = watched
        self._objects: dict[Key, Obj] = {}
        self._listed: dict[tuple[str, str, str], float] = {}  # (kind, namespace, selector) -> when
        self._tombstones: dict[Key, tuple[int | None, float]] = {}

    # -- what the watches and the operator's own writes tell ---------------------------------------

    def observe(self, obj: Obj, deleted: bool = False) -> None:
        """An object as a watch event or a write's answer shows it (`deleted`: it is gone)."""
        if not obj or "metadata" not in obj or "kind" not in obj:
            return
        key = key_of(obj)
        current = self._objects.get(key)
        new_rv, old_rv = resource_version(obj), resource_version(current) if current else None
        if current is not None and new_rv is not None and old_rv is not None and new_rv < old_rv:
            return  # a late event: the cache already holds a newer version
        if deleted:
            self._objects.pop(key, None)
            self._tombstones[key] = (new_rv, time.monotonic())
            return
        tomb = self._tombstones.get(key)
        if tomb is not None and tomb[0] is not None and new_rv is not None and new_rv <= tomb[0]:
            return  # listed before it was deleted
        self._tombstones.pop(key, None)
        self._objects[key] = obj

    def forget(self, kind: str, namespace: str, name: str) -> None:
        """The object was deleted by the operator itself."""
        self._objects.pop((kind, namespace, name), None)
        self._tombstones[(kind, namespace, name)] = (None, time.monotonic())

    def expire(self) -> None:
        """Every collection is listed again at its next read."""
        self._listed.clear()
        now = time.monotonic()
        self._tombstones = {k: v for k, v in self._tombstones.items() if now - v[1] < TOMBSTONE_S}

    # -- reads ---------------------------------------------------------------------------------------

    async def _ensure_listed(self, api_version: str, kind: str, plural: str, namespace: str,
                             selector: Selector | None) -> None:
        sel = ",".join(f"{k}={v}" for k, v in sorted((selector or {}).items()))
        if self.watched and (kind, namespace, sel) in self._listed:
            return
        query = {"labelSelector": sel} if sel else {}
        listing = await self.kube.get(collection_path(api_version, plural, namespace), **query)
        seen = set()
        for item in listing.get("items", []):
            item = {"apiVersion": api_version, "kind": kind, **item}
            seen.add(key_of(item))
            self.observe(item)
        # What the cache held for this collection and the listing no longer shows is gone — unless a
        # watch event brought it after the listing was taken.
        listed_at = resource_version(listing)
        for key in [k for k, o in self._objects.items()
                    if k[0] == kind and k[1] == namespace and k not in seen and matches(o, selector)]:
            rv = resource_version(self._objects[key])
            if listed_at is None or rv is None or rv <= listed_at:
                self._objects.pop(key, None)
        self._listed[(kind, namespace, sel)] = time.monotonic()

    async def list(self, api_version: str, kind: str, plural: str, namespace: str,
                   selector: Selector | None = None) -> list[Obj]:
        await self._ensure_listed(api_version, kind, plural, namespace, selector)
        return [o for k, o in self._objects.items() if k[0] == kind and k[1] == namespace and matches(o, selector)]

    async def get(self, api_version: str, kind: str, plural: str, namespace: str, name: str,
                  selector: Selector | None = None) -> Obj | None:
        """One object of a collection the operator watches (`selector`: labels the object carries, the
        collection that is listed)."""
        if not self.watched:
            obj = await self.kube.get_or_none(f"{collection_path(api_version, plural, namespace)}/{name}")
            return None if obj is None else {"apiVersion": api_version, "kind": kind, **obj}
        await self._ensure_listed(api_version, kind, plural, namespace, selector)
        return self._objects.get((kind, namespace, name))

    def peek(self, kind: str, namespace: str, name: str) -> Obj | None:
        """What the cache holds, without reading anything."""
        return self._objects.get((kind, namespace, name))
