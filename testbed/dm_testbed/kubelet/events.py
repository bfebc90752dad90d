"""Kubernetes Events the kubelet records on pods (Started, Killing, Unhealthy, BackOff, Failed)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

from ..kube import ApiError, Kube
from .status import now_rfc3339

log = logging.getLogger(__name__)
Obj = dict[str, Any]


class EventRecorder:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._tasks: set[asyncio.Task[None]] = set()

    def record(self, pod: Obj, node: str, reason: str, message: str, kind: str = "Normal",
               field_path: str | None = None) -> None:
        """Fire and forget: an event that cannot be written must not hold up the pod."""
        meta = pod["metadata"]
        ref: Obj = {"kind": "Pod", "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"],
                    "apiVersion": "v1", "resourceVersion": meta.get("resourceVersion", "")}
        if field_path:
            ref["fieldPath"] = field_path
        stamp = now_rfc3339()
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": meta["namespace"]},
                "involvedObject": ref, "reason": reason, "message": message, "type": kind,
                "source": {"component": "kubelet", "host": node}, "firstTimestamp": stamp, "lastTimestamp": stamp,
                "count": 1, "reportingComponent": "kubelet", "reportingInstance": node}
        task = asyncio.create_task(self._send(meta["namespace"], body))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, namespace: str, body: Obj) -> None:
        with contextlib.suppress(ApiError, OSError, TimeoutError, RuntimeError):
            await self.kube.create(f"/api/v1/namespaces/{namespace}/events", body)
