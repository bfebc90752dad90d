"""The OpenAPI 3 document of the REST Proxy v2 routes dm serves (GET /openapi.json). A test keeps it equal to
the routes the application registers."""

from __future__ import annotations

from functools import cache
from typing import Any, NamedTuple

from .formats import REQUEST_TYPES as BODY

V2 = "application/vnd.kafka.v2+json"
PRODUCE_TYPES = ("application/vnd.kafka.binary.v2+json", "application/vnd.kafka.json.v2+json", "application/json")
RECORDS_TYPES = ("application/vnd.kafka.binary.v2+json", "application/vnd.kafka.json.v2+json")
INSTANCE = "/consumers/{group}/instances/{name}"


class Operation(NamedTuple):
    method: str
    path: str
    handler: str  # the RestApi method serving it
    summary: str
    body_types: tuple[str, ...]  # request body content types
    status: int  # on success


OPERATIONS: tuple[Operation, ...] = (
    Operation("get", "/healthy", "healthy", "Liveness of this broker's REST Proxy (no authentication)", (), 200),
    Operation("get", "/ready", "ready", "Whether this broker serves requests (no authentication)", (), 200),
    Operation("get", "/openapi", "openapi", "This document", (), 200),
    Operation("get", "/openapi.json", "openapi", "This document", (), 200),
    Operation("get", "/", "root", "An empty object (REST Proxy v2 root)", (), 200),
    Operation("get", "/brokers", "brokers", "The ids of the brokers in the cluster", (), 200),
    Operation("get", "/topics", "topics", "Names of the topics the user may describe", (), 200),
    Operation("get", "/topics/{topic}", "topic", "A topic: configs and partitions", (), 200),
    Operation(
        "post",
        "/topics/{topic}",
        "produce",
        "Produce records; the broker chooses partitions for those naming none",
        PRODUCE_TYPES,
        200,
    ),
    Operation(
        "get",
        "/topics/{topic}/partitions",
        "partitions",
        "A topic's partitions with leaders, replicas and in-sync state",
        (),
        200,
    ),
    Operation("get", "/topics/{topic}/partitions/{partition}", "partition", "One partition", (), 200),
    Operation(
        "post",
        "/topics/{topic}/partitions/{partition}",
        "produce",
        "Produce records to one partition",
        PRODUCE_TYPES,
        200,
    ),
    Operation(
        "get",
        "/topics/{topic}/partitions/{partition}/offsets",
        "partition_offsets",
        "The partition's first and next offsets (beginning_offset, end_offset)",
        (),
        200,
    ),
    Operation(
        "post",
        "/consumers/{group}",
        "create_consumer",
        "Create a consumer instance in a group (on this broker)",
        BODY,
        200,
    ),
    Operation("delete", INSTANCE, "delete_consumer", "Delete a consumer instance (it leaves its group)", (), 204),
    Operation("post", INSTANCE + "/subscription", "subscribe", "Subscribe to topics or a topic_pattern", BODY, 204),
    Operation("get", INSTANCE + "/subscription", "get_subscription", "The subscribed topics", (), 200),
    Operation("delete", INSTANCE + "/subscription", "unsubscribe", "Unsubscribe", (), 204),
    Operation("post", INSTANCE + "/assignments", "assign", "Assign partitions by hand", BODY, 204),
    Operation("get", INSTANCE + "/assignments", "get_assignments", "The partitions assigned", (), 200),
    Operation("get", INSTANCE + "/records", "records", "Read records (query: timeout ms, max_bytes)", (), 200),
    Operation(
        "post",
        INSTANCE + "/offsets",
        "commit",
        "Commit offsets (the last records consumed), or all read when none given",
        BODY,
        200,
    ),
    Operation(
        "get",
        INSTANCE + "/offsets",
        "committed",
        "The committed offsets of the partitions given in the body",
        BODY,
        200,
    ),
    Operation("post", INSTANCE + "/positions", "seek", "Seek partitions to offsets", BODY, 204),
    Operation(
        "post", INSTANCE + "/positions/beginning", "seek_beginning", "Seek partitions to their first offset", BODY, 204
    ),
    Operation("post", INSTANCE + "/positions/end", "seek_end", "Seek partitions to their end", BODY, 204),
)

ERROR = {"type": "object", "properties": {"error_code": {"type": "integer"}, "message": {"type": "string"}}}


def _operation(method: str, path: str, summary: str, body_types: tuple[str, ...], status: int) -> dict[str, Any]:
    params = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": {"type": "integer" if name == "partition" else "string"},
        }
        for name in ("topic", "partition", "group", "name")
        if "{" + name + "}" in path
    ]
    if path.endswith("/records"):
        params += [
            {"name": "timeout", "in": "query", "schema": {"type": "integer"}},
            {"name": "max_bytes", "in": "query", "schema": {"type": "integer"}},
        ]
    responses: dict[str, Any] = {str(status): {"description": "success"}}
    if path not in ("/healthy", "/ready", "/openapi", "/openapi.json"):
        for code, text in (
            ("401", "authentication required or failed"),
            ("403", "not authorized"),
            ("404", "no such topic, partition or consumer instance"),
            ("415", "a body whose Content-Type the route does not take"),
            ("422", "the request cannot be carried out"),
            ("500", "the cluster failed"),
        ):
            responses[code] = {"description": text, "content": {V2: {"schema": ERROR}}}
    op: dict[str, Any] = {
        "summary": summary,
        "operationId": f"{method}{path}".replace("/", "_"),
        "parameters": params,
        "responses": responses,
    }
    if body_types:
        op["requestBody"] = {
            "required": method == "post" and path.startswith("/topics"),
            "content": {t: {"schema": {"type": "object"}} for t in body_types},
        }
    if path.endswith("/records"):
        responses["200"]["content"] = {t: {"schema": {"type": "array"}} for t in RECORDS_TYPES}
    return op


@cache
def openapi_document() -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method] = _operation(op.method, op.path, op.summary, op.body_types, op.status)
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "dm REST Proxy",
            "version": "v2",
            "description": "Confluent REST Proxy API v2, served by every dm broker (docs/http.md).",
        },
        "components": {"securitySchemes": {"basic": {"type": "http", "scheme": "basic"}}},
        "paths": paths,
    }
