"""A small asyncio client for the Kubernetes REST API (JSON dicts in and out) and an informer that
keeps a local cache of one resource through list + watch, re-listing when the watch expires."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class ApiError(Exception):
    def __init__(self, status: int, body: Obj | str, what: str) -> None:
        self.status = status
        self.body = body
        reason = body.get("message", body) if isinstance(body, dict) else body
        super().__init__(f"{what}: HTTP {status}: {reason}")


def key_of(obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


class Kube:
    def __init__(self, server: str, ssl_context: ssl.SSLContext, token: str | None = None) -> None:
        self.server = server.rstrip("/")
        self.ssl = ssl_context
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def in_cluster(cls) -> Kube:
        """The API server as a pod reaches it: its Service address and its service account's token."""
        account = Path("/var/run/secrets/kubernetes.io/serviceaccount")
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
        context = ssl.create_default_context(cafile=str(account / "ca.crt"))
        return cls(f"https://{host}:{port}", context, (account / "token").read_text().strip())

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.ssl, limit=64),
                                                  headers=self.headers)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def request(self, method: str, path: str, body: Obj | None = None, params: dict[str, str] | None = None,
                      content_type: str = "application/json", timeout_s: float = 30) -> Obj:
        data = json.dumps(body) if body is not None else None
        headers = {"Content-Type": content_type} if data is not None else {}
        async with self.session.request(method, self.server + path, data=data, params=params, headers=headers,
                                        timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            text = await resp.text()
            try:
                payload = json.loads(text) if text else {}
            except json.JSONDecodeError:
                payload = {"message": text}
            if resp.status >= 400:
                raise ApiError(resp.status, payload, f"{method} {path}")
            return payload

    async def get(self, path: str, **params: str) -> Obj:
        return await self.request("GET", path, params=params or None)

    async def get_or_none(self, path: str) -> Obj | None:
        try:
            return await self.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def create(self, path: str, body: Obj) -> Obj:
        return await self.request("POST", path, body)

    async def create_or_get(self, path: str, body: Obj) -> Obj:
        try:
            return await self.create(path, body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            return await self.get(f"{path}/{body['metadata']['name']}")

    async def patch(self, path: str, body: Obj) -> Obj:
        return await self.request("PATCH", path, body, content_type="application/merge-patch+json")

    async def delete(self, path: str, body: Obj | None = None) -> Obj | None:
        try:
            return await self.request("DELETE", path, body)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def watch(self, path: str, resource_version: str) -> AsyncIterator[Obj]:
        params = {"watch": "1", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": "300"}
        async with self.session.get(self.server + path, params=params,
                                    timeout=aiohttp.ClientTimeout(total=None, sock_read=330)) as resp:
            if resp.status >= 400:
                raise ApiError(resp.status, await resp.text(), f"WATCH {path}")
            async for line in resp.content:
                if line.strip():
                    yield json.loads(line)


Handler = Callable[[str, Obj], Awaitable[None] | None]


class Informer:
    """List + watch of one collection path (e.g. /api/v1/pods); `cache` maps (namespace, name) to the
    latest object and `handler(event_type, obj)` is called for every change, in order."""

    def __init__(self, kube: Kube, path: str, handler: Handler | None = None) -> None:
        self.kube = kube
        self.path = path
        self.handler = handler
        self.cache: dict[tuple[str, str], Obj] = {}
        self.synced = asyncio.Event()
        self._changed = asyncio.Condition()

    async def _emit(self, kind: str, obj: Obj) -> None:
        if self.handler is not None:
            result = self.handler(kind, obj)
            if asyncio.iscoroutine(result):
                await result
        async with self._changed:
            self._changed.notify_all()

    async def run(self) -> None:
        while True:
            try:
                listing = await self.kube.get(self.path)
                fresh = {key_of(o): o for o in listing.get("items", [])}
                for key, old in list(self.cache.items()):
                    if key not in fresh:
                        del self.cache[key]
                        await self._emit("DELETED", old)
                for key, obj in fresh.items():
                    known = self.cache.get(key)
                    self.cache[key] = obj
                    if known is None or known["metadata"].get("resourceVersion") != obj["metadata"].get(
                            "resourceVersion"):
                        await self._emit("ADDED" if known is None else "MODIFIED", obj)
                self.synced.set()
                rv = listing["metadata"]["resourceVersion"]
                while True:
                    expired = False
                    async for event in self.kube.watch(self.path, rv):
                        kind, obj = event["type"], event["object"]
                        if kind == "ERROR":
                            expired = True
                            break
                        rv = obj["metadata"].get("resourceVersion", rv)
                        if kind == "BOOKMARK":
                            continue
                        if kind == "DELETED":
                            self.cache.pop(key_of(obj), None)
                        else:
                            self.cache[key_of(obj)] = obj
                        await self._emit(kind, obj)
                    if expired:
                        break
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the API server restarting or a dropped watch: list again shortly
                log.debug("informer %s: %s; listing again", self.path, exc)
                await asyncio.sleep(0.5)

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(predicate), timeout_s)
                return True
            except TimeoutError:
                return False
