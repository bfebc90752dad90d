"""`kubectl get … -o json` answered over one client connection instead of a kubectl process.

The scenarios poll the API server several times a second (readiness, leaders, ISRs). A kubectl process
costs about 85 ms of CPU: process accounting over a whole `make test` counted 2,661 of them, 3.7
CPU-minutes, on a machine whose two cores the suite keeps busy from start to end. A GET on a kept-alive
connection costs a few milliseconds. Only what the scenarios ask of `get` is understood (a resource by any
of the names kubectl takes, a name, `-n`, `-l`, `--field-selector`); anything else is refused."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

REQUEST_TIMEOUT_S = 30
FLAGS = {"-n": "namespace", "--namespace": "namespace", "-l": "labelSelector", "--selector": "labelSelector",
         "--field-selector": "fieldSelector"}


class ApiUnavailable(Exception):
    """The API server did not answer (a polling loop tries again)."""


class NotFound(Exception):
    pass


@dataclass(frozen=True)
class Resource:
    prefix: str  # /api/v1 or /apis/<group>/<version>
    plural: str
    kind: str
    namespaced: bool


@dataclass(frozen=True)
class GetRequest:
    resource: str
    name: str | None
    namespace: str | None
    query: dict[str, str]


def parse_get(args: tuple[str, ...]) -> GetRequest:
    """kubectl get's arguments, as the scenarios write them: TYPE [NAME] [-n NS] [-l SEL] [--field-selector F]."""
    positional: list[str] = []
    options: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in FLAGS and i + 1 < len(args):
            options[FLAGS[arg]] = args[i + 1]
            i += 2
        elif arg.startswith("-") or "," in arg or "/" in arg:
            raise ValueError(f"kubeapi: `kubectl get` argument {arg!r} is not understood here; use kubectl")
        else:
            positional.append(arg)
            i += 1
    if not 1 <= len(positional) <= 2:
        raise ValueError(f"kubeapi: expected TYPE [NAME], got {positional}")
    namespace = options.pop("namespace", None)
    return GetRequest(positional[0], positional[1] if len(positional) == 2 else None, namespace, options)


class ApiReader:
    """Reads objects as `kubectl get -o json` prints them (lists with each item's kind and apiVersion)."""

    def __init__(self, kubeconfig: Path) -> None:
        self._api = config.new_client_from_config(str(kubeconfig))
        self._resources: dict[str, Resource] = {}
        self._lock = threading.Lock()  # client pods' threads poll too

    def get(self, *args: str) -> Any:
        """Raises NotFound for a missing object, ApiUnavailable when the server does not answer."""
        request = parse_get(args)
        resource = self._resource(request.resource)
        path = resource.prefix
        if resource.namespaced and request.namespace:
            path += f"/namespaces/{request.namespace}"
        path += f"/{resource.plural}" + (f"/{request.name}" if request.name else "")
        answer = self._get(path, request.query)
        if request.name is None:  # kubectl names each item's kind in a list; the API names only the list's
            kind, version = answer.get("kind", "").removesuffix("List"), answer.get("apiVersion")
            for item in answer.get("items", []):
                item.setdefault("kind", kind)
                item.setdefault("apiVersion", version)
        return answer

    def _get(self, path: str, query: dict[str, str]) -> Any:
        method, url, headers, _, _ = self._api.param_serialize(
            "GET", path, query_params=list(query.items()), header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"])
        try:
            response = self._api.call_api(method, url, header_params=headers, _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as exc:  # raised for the connection's own failures
            raise ApiUnavailable(f"GET {path}: {exc}") from None
        except HTTPError as exc:
            raise ApiUnavailable(f"GET {path}: {exc}") from None
        body = response.read()
        if response.status == 404:
            raise NotFound(f"GET {path}: not found")
        if response.status >= 500 or response.status == 429:
            raise ApiUnavailable(f"GET {path}: {response.status} {body[:300]!r}")
        if response.status >= 400:
            raise AssertionError(f"GET {path}: {response.status} {body[:500]!r}")
        return json.loads(body)

    def _resource(self, name: str) -> Resource:
        with self._lock:
            if name not in self._resources:
                self._discover()  # again: a CRD installed since the last discovery
            if name not in self._resources:
                raise ValueError(f"kubeapi: the API server serves no resource called {name!r}")
            return self._resources[name]

    def _discover(self) -> None:
        """Every name kubectl takes for a resource (plural, singular, kind, short names); the core group
        first and then each group's preferred version, as kubectl resolves them."""
        found: dict[str, Resource] = {}

        def add(prefix: str) -> None:
            for r in self._get(prefix, {})["resources"]:
                if "/" in r["name"]:  # a subresource (pods/log, …)
                    continue
                resource = Resource(prefix, r["name"], r["kind"], r["namespaced"])
                for alias in (r["name"], r.get("singularName") or "", r["kind"].lower(), *r.get("shortNames", [])):
                    if alias:
                        found.setdefault(alias, resource)

        add("/api/v1")
        for group in self._get("/apis", {})["groups"]:
            add(f"/apis/{group['preferredVersion']['groupVersion']}")
        self._resources = found
