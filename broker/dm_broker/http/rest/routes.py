"""The REST Proxy v2 routes (docs/http.md): topics, produce, brokers, consumer instances, health."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiokafka import TopicPartition

from ...security.acls import Operation, ResourceType
from ...security.session import Session
from ...topics import INTERNAL_TOPICS
from . import jsonio
from .auth import REALM, HttpAuthenticator
from .bodies import (
    ConsumerConfigBody,
    M,
    OffsetsBody,
    PartitionRef,
    PartitionsBody,
    SubscriptionBody,
    parse_json,
    parse_produce,
    records_within,
)
from .consumers import ConsumerInstance, ConsumerRegistry
from .errors import (
    INVALID_CONSUMER_CONFIG,
    INVALID_REQUEST,
    V2_JSON,
    RestError,
    error_response,
    forbidden,
    not_found_partition,
    unprocessable,
)
from .formats import accepted_format, check_request_type, content_type, embedded_format_of
from .openapi import OPERATIONS, openapi_document
from .producer import RestProducer

if TYPE_CHECKING:
    from ...broker import Broker

log = logging.getLogger(__name__)
SESSION = web.AppKey("session", Session)
READ_TIMEOUT = web.AppKey("read_timeout_s", float)
MAX_BODY = web.AppKey("max_body_bytes", int)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
OPEN_PATHS = ("/healthy", "/ready", "/openapi", "/openapi.json")


def v2(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=jsonio.dumps(data), status=status, content_type=V2_JSON)


def no_content() -> web.Response:
    return web.Response(status=204)


async def read_body(request: web.Request) -> bytes:
    """The body; 408 when it does not arrive within http.request.timeout.ms (a client trickling a body must
    not hold a request open for ever)."""
    timeout_s = request.app[READ_TIMEOUT]
    declared, largest = request.content_length, request.app[MAX_BODY]
    if declared is not None and declared > largest:  # refused at once, not after waiting for what it declared
        raise RestError(413, 41301, f"the request body of {declared} bytes is larger than {largest} "
                                    "(http.request.max.bytes)")
    try:
        async with asyncio.timeout(timeout_s):
            return await request.read()
    except TimeoutError:
        raise RestError(408, 40801, f"the request body did not arrive within {timeout_s:.0f} s "
                                    "(http.request.timeout.ms)") from None


async def body(request: web.Request, model: type[M], code: int = INVALID_REQUEST, required: bool = True) -> M:
    """The body of a request without embedded records as `model` (parsed and validated in one pass); without
    a body, `model`'s defaults unless `required`."""
    check_request_type(request.headers.get("Content-Type", ""))
    return parse_json(model, await read_body(request), code, required)


def topic_partitions(refs: list[PartitionRef]) -> list[TopicPartition]:
    return [TopicPartition(r.topic, r.partition) for r in refs]


class RestApi:
    def __init__(self, broker: Broker, producer: RestProducer, consumers: ConsumerRegistry,
                 authenticator: HttpAuthenticator, base_uri: str) -> None:
        self.broker = broker
        self.producer = producer
        self.consumers = consumers
        self.auth = authenticator
        self.base_uri = base_uri.rstrip("/")

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.broker.config["http.request.max.bytes"],
                              middlewares=[self._serve])
        app[READ_TIMEOUT] = self.broker.config["http.request.timeout.ms"] / 1000
        app[MAX_BODY] = self.broker.config["http.request.max.bytes"]
        for op in OPERATIONS:  # the routes are the OpenAPI document's operations: one table for both
            app.router.add_route(op.method.upper(), op.path, getattr(self, op.handler))
        return app

    # -- middleware -------------------------------------------------------------------------------

    @web.middleware
    async def _serve(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Every request: who it is from, errors in v2's shape, and dm_rest_requests_total /
        dm_rest_request_duration_seconds by route pattern (not by path: a consumer instance's name in a
        label would grow without bound). One middleware, not three: it runs on every produce."""
        started = time.perf_counter()
        response = await self._answer(request, handler)
        info = request.match_info.route.resource
        route = f"{request.method} {info.canonical if info is not None else 'unmatched'}"
        metrics = self.broker.metrics
        metrics.rest_requests.labels(route, str(response.status)).inc()
        metrics.rest_request_latency.labels(route).observe(time.perf_counter() - started)
        return response

    async def _answer(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            if request.path not in OPEN_PATHS:
                request[SESSION] = await self.auth.session(request)
            return await handler(request)
        except RestError as exc:
            headers = {"WWW-Authenticate": REALM} if exc.status == 401 else None
            return error_response(exc.status, exc.error_code, exc.message, headers)
        except web.HTTPRequestEntityTooLarge as exc:
            return error_response(413, 41301, f"the request body exceeds http.request.max.bytes "
                                              f"({self.broker.config['http.request.max.bytes']} bytes): {exc.text}")
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return error_response(exc.status, exc.status, exc.reason or "error")
        except Exception as exc:
            log.exception("REST %s %s failed", request.method, request.path)
            return error_response(500, 500, f"internal error: {type(exc).__name__}: {exc}")

    # -- health and discovery ---------------------------------------------------------------------

    async def healthy(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "node_id": self.broker.node_id})

    async def ready(self, _: web.Request) -> web.Response:
        if self.broker.ready and self.broker.metadata is not None:
            return web.json_response({"status": "ready", "node_id": self.broker.node_id})
        return web.json_response({"status": "not ready"}, status=503)

    async def openapi(self, _: web.Request) -> web.Response:
        return web.json_response(openapi_document())

    async def root(self, _: web.Request) -> web.Response:
        return v2({})

    # -- cluster metadata -------------------------------------------------------------------------

    async def brokers(self, request: web.Request) -> web.Response:
        self._allow(request, Operation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster")
        md = self.broker.metadata
        return v2({"brokers": sorted(b.node_id for b in md.brokers if not b.fenced) if md else []})

    async def topics(self, request: web.Request) -> web.Response:
        md = self.broker.metadata
        session = request[SESSION]
        names = sorted(t for t in (md.topics if md else {}) if t not in INTERNAL_TOPICS
                       and self.broker.security.allowed(session, Operation.DESCRIBE, ResourceType.TOPIC, t))
        return v2(names)

    def _described(self, request: web.Request) -> Any:
        name = request.match_info["topic"]
        doc = self.producer.topic(name)
        self._allow(request, Operation.DESCRIBE, ResourceType.TOPIC, name)
        return doc

    @staticmethod
    def _partition_json(index: int, state: Any) -> dict[str, Any]:
        return {"partition": index, "leader": state.leader,
                "replicas": [{"broker": r, "leader": r == state.leader, "in_sync": r in state.isr}
                             for r in state.replicas]}

    async def topic(self, request: web.Request) -> web.Response:
        doc = self._described(request)
        return v2({"name": doc.name, "configs": dict(doc.configs),
                   "partitions": [self._partition_json(i, s) for i, s in enumerate(doc.partitions)]})

    async def partitions(self, request: web.Request) -> web.Response:
        doc = self._described(request)
        return v2([self._partition_json(i, s) for i, s in enumerate(doc.partitions)])

    async def partition(self, request: web.Request) -> web.Response:
        doc = self._described(request)
        index = self._partition_index(request, len(doc.partitions))
        return v2(self._partition_json(index, doc.partitions[index]))

    async def partition_offsets(self, request: web.Request) -> web.Response:
        doc = self._described(request)
        index = self._partition_index(request, len(doc.partitions))
        start, end = await self.producer.partition_offsets(doc.name, index, request[SESSION])
        return v2({"beginning_offset": start, "end_offset": end})

    @staticmethod
    def _partition_index(request: web.Request, count: int) -> int:
        text = request.match_info["partition"]
        topic = request.match_info["topic"]
        if not text.lstrip("-").isdigit() or not 0 <= int(text) < count:
            raise not_found_partition(topic, int(text) if text.lstrip("-").isdigit() else -1)
        return int(text)

    def _allow(self, request: web.Request, operation: Operation, resource: ResourceType, name: str) -> None:
        if not self.broker.security.allowed(request[SESSION], operation, resource, name):
            what = "topics: [" + name + "]" if resource == ResourceType.TOPIC else f"{resource.name.lower()}: {name}"
            raise forbidden(f"Not authorized to access {what} ({operation.name})")

    # -- produce ----------------------------------------------------------------------------------

    async def produce(self, request: web.Request) -> web.Response:
        fmt = embedded_format_of(request.headers.get("Content-Type", ""))
        topic = request.match_info["topic"]
        doc = self.producer.topic(topic)
        self._allow(request, Operation.WRITE, ResourceType.TOPIC, doc.name)  # before a byte of the body is read
        fixed = self._partition_index(request, len(doc.partitions)) if "partition" in request.match_info else None
        with self.producer.gatherer.request() as arrival:
            raw = await read_body(request)
            limit = self.broker.config["http.produce.max.records"]
            if not records_within(raw, limit):
                raise unprocessable(f"a produce request carries at most {limit} records (http.produce.max.records)")
            records = parse_produce(fmt, raw)
            if fixed is not None:
                named = next((i for i, r in enumerate(records) if r.partition is not None), None)
                if named is not None:
                    raise unprocessable(f"records[{named}] names a partition; this URL already names partition "
                                        f"{fixed}")
            offsets = await self.producer.produce(doc, records, fixed, request[SESSION], arrival)
        return v2({"key_schema_id": None, "value_schema_id": None, "offsets": offsets})

    # -- consumer instances -----------------------------------------------------------------------

    def _instance(self, request: web.Request) -> ConsumerInstance:
        return self.consumers.get(request.match_info["group"], request.match_info["name"], request[SESSION])

    async def create_consumer(self, request: web.Request) -> web.Response:
        group = request.match_info["group"]
        config = await body(request, ConsumerConfigBody, INVALID_CONSUMER_CONFIG, required=False)
        instance = await self.consumers.create(group, config, request[SESSION])
        return v2({"instance_id": instance.name,
                   "base_uri": f"{self.base_uri}/consumers/{group}/instances/{instance.name}"})

    async def delete_consumer(self, request: web.Request) -> web.Response:
        await self.consumers.delete(request.match_info["group"], request.match_info["name"], request[SESSION])
        return no_content()

    async def subscribe(self, request: web.Request) -> web.Response:
        instance = self._instance(request)
        await self.consumers.subscribe(instance, (await body(request, SubscriptionBody)), request[SESSION])
        return no_content()

    async def get_subscription(self, request: web.Request) -> web.Response:
        return v2({"topics": self.consumers.subscription(self._instance(request))})

    async def unsubscribe(self, request: web.Request) -> web.Response:
        await self.consumers.unsubscribe(self._instance(request))
        return no_content()

    async def assign(self, request: web.Request) -> web.Response:
        instance = self._instance(request)
        refs = (await body(request, PartitionsBody)).partitions
        await self.consumers.assign(instance, topic_partitions(refs), request[SESSION])
        return no_content()

    async def get_assignments(self, request: web.Request) -> web.Response:
        assigned = sorted(self._instance(request).consumer.assignment())
        return v2({"partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in assigned]})

    async def records(self, request: web.Request) -> web.Response:
        instance = self._instance(request)
        accepted_format(request.headers.get("Accept", ""), instance.settings.format)
        timeout = self._query_int(request, "timeout")
        max_bytes = self._query_int(request, "max_bytes")
        answer = await self.consumers.records(instance, timeout, max_bytes, request[SESSION])
        return web.Response(body=answer, content_type=content_type(instance.settings.format))

    @staticmethod
    def _query_int(request: web.Request, name: str) -> int | None:
        text = request.query.get(name)
        if text is None or text == "":
            return None
        if not text.isdigit():
            raise unprocessable(f"{name} must be a non-negative integer")
        return int(text)

    async def commit(self, request: web.Request) -> web.Response:
        instance = self._instance(request)
        given = (await body(request, OffsetsBody, required=False)).offsets
        offsets = {TopicPartition(o.topic, o.partition): (o.offset, o.metadata) for o in given} if given else None
        await self.consumers.commit(instance, offsets, request[SESSION])
        return v2({}, status=200)

    async def committed(self, request: web.Request) -> web.Response:
        instance = self._instance(request)
        partitions = topic_partitions((await body(request, PartitionsBody)).partitions)
        return v2({"offsets": await self.consumers.committed(instance, partitions, request[SESSION])})

    async def seek(self, request: web.Request) -> web.Response:
        instance = self._instance(request)
        given = (await body(request, OffsetsBody)).offsets
        await self.consumers.seek(instance, {TopicPartition(o.topic, o.partition): o.offset for o in given})
        return no_content()

    async def seek_beginning(self, request: web.Request) -> web.Response:
        instance = self._instance(request)
        refs = (await body(request, PartitionsBody)).partitions
        await self.consumers.seek_to(instance, topic_partitions(refs), end=False)
        return no_content()

    async def seek_end(self, request: web.Request) -> web.Response:
        instance = self._instance(request)
        refs = (await body(request, PartitionsBody)).partitions
        await self.consumers.seek_to(instance, topic_partitions(refs), end=True)
        return no_content()
