"""The operator's Kubernetes API calls: JSON dicts over the official client (its authentication,
in-cluster or kubeconfig), each blocking call run in a small thread pool so the event loop — the
controller's hot path — never waits on the network."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException

from .metrics import API_REQUESTS
from .objects import Obj

log = logging.getLogger(__name__)
MERGE = "application/merge-patch+json"
SLOW_CALL_S = 5.0
REQUEST_TIMEOUT_S = 30.0
BEST_EFFORT_TIMEOUT_S = 5.0


class ApiError(Exception):
    def __init__(self, status: int, body: Obj, what: str) -> None:
        self.status = status
        self.body = body
        super().__init__(f"{what}: HTTP {status}: {body.get('message', body)}")

    @property
    def reason(self) -> str:
        return str(self.body.get("reason", ""))

    @property
    def namespace_terminating(self) -> bool:
        """Refused because the namespace is being deleted (the NamespaceLifecycle admission plugin)."""
        return self.status == 403 and "because it is being terminated" in str(self.body.get("message", ""))


def load_api_client() -> client.ApiClient:
    configuration = client.Configuration()
    try:
        kube_config.load_incluster_config(client_configuration=configuration)
    except kube_config.ConfigException:
        # KUBECONFIG as it is now (the library reads it once, when it is imported).
        kube_config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None,
                                     client_configuration=configuration)
    # Every lane's threads may hold a connection at once (urllib3 drops what exceeds its pool).
    configuration.connection_pool_maxsize = 32
    return client.ApiClient(configuration)


def resource_of(path: str) -> str:
    """The resource (and subresource) a request path addresses, for metrics: topics/status, pods..."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:] if parts[:1] == ["apis"] else parts
    if parts[:1] == ["namespaces"] and len(parts) >= 3:
        parts = parts[2:]
    if not parts:
        return "namespaces" if path.rstrip("/").endswith("namespaces") else "discovery"
    return parts[0] + (f"/{parts[2]}" if len(parts) >= 3 else "")


class Kube:
    """`threads` calls at a time on this lane; `lane()` gives another lane on the same connection
    pool, so a burst of one DMCluster's writes cannot hold the threads another cluster's state needs."""

    def __init__(self, api_client: client.ApiClient | None = None, threads: int = 8,
                 best_effort: ThreadPoolExecutor | None = None) -> None:
        self.api = api_client or load_api_client()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kube-api")
        # Events and other calls nothing waits for get a lane of their own with a short timeout:
        # a burst of them that hangs must not hold the threads the controller's state needs.
        self._owns_best_effort = best_effort is None
        self._best_effort_pool = best_effort or ThreadPoolExecutor(max_workers=2,
                                                                   thread_name_prefix="kube-best-effort")

    def lane(self, threads: int = 4) -> Kube:
        return Kube(self.api, threads, best_effort=self._best_effort_pool)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._owns_best_effort:
            self._best_effort_pool.shutdown(wait=False, cancel_futures=True)

    def _call(self, method: str, path: str, body: Any, query: dict[str, str] | None, content_type: str,
              timeout: float) -> Obj:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        method, url, headers, body, _ = self.api.param_serialize(
            method, path, query_params=list((query or {}).items()), header_params=headers, body=body,
            auth_settings=["BearerToken"])
        try:
            resp = self.api.call_api(method, url, header_params=headers, body=body, _request_timeout=timeout)
        except ApiException as exc:
            raise ApiError(exc.status or 0, {"message": str(exc.reason)}, f"{method} {path}") from None
        data = resp.read()
        try:
            payload = json.loads(data) if data else {}
        except json.JSONDecodeError:
            payload = {"message": data.decode(errors="replace")[:500]}
        if resp.status >= 400:
            log.debug("%s %s failed (%d); body: %s", method, path, resp.status, body)
            raise ApiError(resp.status, payload, f"{method} {path}")
        return payload

    async def request(self, method: str, path: str, body: Any = None, query: dict[str, str] | None = None,
                      content_type: str = "application/json", best_effort: bool = False) -> Obj:
        loop = asyncio.get_running_loop()
        pool, timeout = (self._best_effort_pool, BEST_EFFORT_TIMEOUT_S) if best_effort else \
            (self._pool, REQUEST_TIMEOUT_S)
        started = time.monotonic()
        API_REQUESTS.labels(verb=method, resource=resource_of(path)).inc()
        try:
            return await loop.run_in_executor(pool, self._call, method, path, body, query, content_type, timeout)
        finally:
            took = time.monotonic() - started
            if took > SLOW_CALL_S:  # waiting for a free thread counts: that is what callers feel
                log.warning("%s %s took %.1fs", method, path, took)

    async def get(self, path: str, **query: str) -> Obj:
        return await self.request("GET", path, query=query or None)

    async def get_or_none(self, path: str) -> Obj | None:
        try:
            return await self.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def create(self, path: str, body: Obj, best_effort: bool = False) -> Obj:
        return await self.request("POST", path, body, best_effort=best_effort)

    async def patch(self, path: str, body: Obj) -> Obj:
        return await self.request("PATCH", path, body, content_type=MERGE)

    async def replace(self, path: str, body: Obj) -> Obj:
        """PUT: the whole object; with metadata.resourceVersion set, only if nobody changed it since (409)."""
        return await self.request("PUT", path, body)

    async def delete(self, path: str, body: Obj | None = None) -> Obj | None:
        try:
            return await self.request("DELETE", path, body)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def served(self, group_version: str) -> bool:
        """Whether the API server serves e.g. policy/v1 (discovery)."""
        path = f"/apis/{group_version}" if "/" in group_version else f"/api/{group_version}"
        try:
            await self.get(path)
            return True
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise


def collection_path(api_version: str, plural: str, namespace: str | None) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"


PLURALS = {"ConfigMap": "configmaps", "Secret": "secrets", "Service": "services", "ServiceAccount": "serviceaccounts",
           "StatefulSet": "statefulsets", "PodDisruptionBudget": "poddisruptionbudgets", "Pod": "pods",
           "PersistentVolumeClaim": "persistentvolumeclaims", "Event": "events", "Topic": "topics", "User": "users",
           "DMCluster": "dmclusters", "NetworkPolicy": "networkpolicies"}


def object_path(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{collection_path(obj['apiVersion'], PLURALS[obj['kind']], meta.get('namespace'))}/{meta['name']}"
