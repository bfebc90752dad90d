"""Kubernetes Events, sent the way Kubernetes' own recorders send them: without waiting, on a lane of
their own with a short timeout, dropped when the API server does not take them. Nothing waits for an
Event, so a burst that hangs must never hold up the calls that save the controller's state."""

from __future__ import annotations

import asyncio
import contextlib
import time

import urllib3

from .kube import ApiError, Kube, collection_path
from .objects import Obj

COMPONENT = "dm-operator"


async def post_event(kube: Kube, namespace: str, involved: Obj, reason: str, message: str, kind: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    body = {"apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{involved['name']}.", "namespace": namespace},
            "involvedObject": involved, "reason": reason, "message": message[:1000], "type": kind,
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
            "reportingInstance": COMPONENT, "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1}
    # A timeout (urllib3's errors are not OSErrors) drops the event.
    with contextlib.suppress(ApiError, OSError, RuntimeError, urllib3.exceptions.HTTPError):
        await kube.create(collection_path("v1", "events", namespace), body, best_effort=True)


class EventRecorder:
    """Events about one namespace's objects; `default` is the object they are about unless told."""

    def __init__(self, kube: Kube, namespace: str, default: Obj) -> None:
        self.kube = kube
        self.namespace = namespace
        self.default = default
        self._tasks: set[asyncio.Task[None]] = set()

    def record(self, reason: str, message: str, kind: str = "Normal", involved: Obj | None = None) -> None:
        task = asyncio.create_task(post_event(self.kube, self.namespace, involved or self.default, reason, message,
                                              kind))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def flush(self) -> None:
        """Waits for the Events sent so far (each is bounded by the best-effort timeout)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def reference(obj: Obj) -> Obj:
    """An object as an Event's involvedObject."""
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"],
            "namespace": meta.get("namespace"), "uid": meta.get("uid")}
