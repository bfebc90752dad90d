"""Dispatch of decoded requests to handlers, and the table of supported APIs."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.errors import ErrorCode

from .build import ZERO, make, nested
from .codec import (
    API_VERSIONS_KEY,
    EncodedResponse,
    ProtocolError,
    RequestHeader,
    TooManyElements,
    decode_body,
    decode_request,
    encode_response,
    peek_header,
    request_class,
    response_class,
)

if TYPE_CHECKING:
    from ..broker import Broker

from ..quotas.entities import REQUEST_PERCENTAGE
from ..quotas.handler_time import TimedCoroutine
from ..security.acls import CLUSTER_NAME, Operation, ResourceType
from ..security.session import Session
from ..steps import PARTITIONS_PER_STEP
from . import offload
from .access import AUTHORIZATION_ERRORS, Access, UndeclaredCheck

log = logging.getLogger(__name__)

Handler = Callable[["RequestContext", Any], Awaitable[Any]]
T = TypeVar("T")
K = TypeVar("K")
FETCH_KEY = 1
STEP_SECONDS = 0.01  # the longest a request's handler runs before the loop's next turn (turn())


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    header: RequestHeader
    response_cls: type
    peer: str
    session: Session
    access: Access
    ordered: asyncio.Future[None] | None = None
    api: str = ""
    throttle_s: float = 0.0  # a client quota's throttle for this request (the longest asked for)
    size: int = 0  # bytes of the request frame
    _work: int = 0  # items worked through since the loop's last turn
    _since: float = dataclasses.field(default_factory=time.perf_counter)  # when the loop last had its turn
    _decided: dict[tuple[Operation, ResourceType, str], bool] | None = None  # the authorizer's answers so far

    async def turn(self, items: int = 1) -> None:
        """Handlers call this for the items of the request they work through (a topic, a partition, a
        group): every PARTITIONS_PER_STEP items, or sooner once STEP_SECONDS have gone by since the last
        turn, the loop gets its turn, so other connections wait for at most one step of a large request,
        never for all of it (ADR 0039's steps, issue 65). Items cost from a microsecond to a millisecond,
        and on a crowded node a step's wall time grows with the wait for a CPU: the clock bounds both."""
        self._work += items
        if self._work >= PARTITIONS_PER_STEP or time.perf_counter() - self._since >= STEP_SECONDS:
            self._work = 0
            await asyncio.sleep(0)
            self._since = time.perf_counter()

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def client_id(self) -> str:
        return self.header.client_id or ""

    def record_quota(self, quota: str, value: float) -> float:
        """Counts `value` against the client's quota; the request is throttled as long as it asks."""
        throttle = self.broker.quotas.record(quota, self.session.principal.name, self.client_id, value)
        if throttle > 0:
            self.throttle(throttle)
        return throttle

    def throttle(self, seconds: float) -> None:
        """KIP-219: the answer carries the longest throttle asked for, and the connection is not read for
        that long — from now, as the next request may be read before this one is answered."""
        self.throttle_s = max(self.throttle_s, seconds)
        self.session.mute(seconds)

    @property
    def listener_name(self) -> str:
        """The listener the request came in on."""
        return self.session.listener.name

    def _declared(self, operation: Operation, resource_type: ResourceType) -> None:
        if not self.access.declares(resource_type, operation):
            raise UndeclaredCheck(f"{self.api} asked for {operation.name} on {resource_type.name}, which its "
                                  "entry in the API table does not declare")

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """Whether this connection's principal may do `operation` on the resource (always, without
        an authorizer). Only what the API's Access declares may be asked."""
        self._declared(operation, resource_type)
        # A request may name one resource many times (a topic per partition): asked once per request.
        if self._decided is None:
            self._decided = {}
        key = (operation, resource_type, name)
        decided = self._decided.get(key)
        if decided is None:
            decided = self._decided[key] = self.broker.security.allowed(self.session, operation, resource_type, name)
        return decided

    def allowed_any(self, operation: Operation, resource_type: ResourceType) -> bool:
        self._declared(operation, resource_type)
        return self.broker.security.allowed_any(self.session, operation, resource_type)

    def denied(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """The opposite of allowed(), counted (dm_authorization_denials_total) and logged at debug."""
        if self.allowed(operation, resource_type, name):
            return False
        self.broker.metrics.authorization_denials.labels(self.api).inc()
        log.debug("%s: %s may not %s %s %s", self.api, self.session.principal, operation.name, resource_type.name,
                  name)
        return True

    async def built(self, items: Iterable[T], build: Callable[[T], Any]) -> tuple[Any, ...]:
        """tuple(build(item) for item in items), giving the loop its turn as turn() does: for the answers
        that carry an entry per item of the request."""
        out = []
        for item in items:
            await self.turn()
            out.append(build(item))
        return tuple(out)

    async def built_by_key(self, grouped: Mapping[K, list[Any]], build: Callable[[K, tuple[Any, ...]], Any]
                           ) -> tuple[Any, ...]:
        """build(key, entries) for each key of a grouped answer (a topic and its partitions' entries, in the
        order first seen), a step at a time as built() does."""
        return await self.built(grouped.items(), lambda kv: build(kv[0], tuple(kv[1])))

    def release_order(self) -> None:
        """The rest of this request does not affect the order of later ones on the connection
        (e.g. its batches are appended), so the server may read the next request meanwhile."""
        if self.ordered is not None and not self.ordered.done():
            self.ordered.set_result(None)


@dataclass(frozen=True, slots=True)
class ApiSpec:
    key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler
    access: Access
    # Kafka keeps advertising Produce v0-2 after removing them (librdkafka refuses a broker that
    # does not); requests at those versions are still refused.
    advertised_min: int | None = None


CLIENT_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


class Dispatcher:
    def __init__(self, broker: Broker, specs: list[ApiSpec]) -> None:
        self.broker = broker
        self.apis = {spec.key: spec for spec in specs}
        self.max_elements: int = broker.config["socket.request.max.elements"]

    def advertised(self) -> list[tuple[int, int, int]]:
        return [
            (s.key, s.min_version if s.advertised_min is None else s.advertised_min, s.max_version)
            for s in sorted(self.apis.values(), key=lambda s: s.key)
        ]

    async def handle(self, frame: bytes | memoryview, peer: str, session: Session,
                     ordered: asyncio.Future[None] | None = None) -> list[bytes | memoryview] | None:
        """Returns the response frame, or None when the request gets no response (acks=0).
        Raises ProtocolError when the connection must be closed. Fails closed: a request without a
        session, of an unknown API, or whose handler asks an undeclared question is refused."""
        if not isinstance(session, Session):
            raise ProtocolError("a request without a session is refused")
        if session.raw_tokens:
            from .handlers.sasl import raw_sasl_token

            return await raw_sasl_token(self.broker, session, bytes(frame))
        api_key, version, correlation_id = peek_header(frame)
        spec = self.apis.get(api_key)
        if spec is None:
            raise ProtocolError(f"unsupported API key {api_key}")
        if not spec.access.public:
            if not session.authenticated:
                raise ProtocolError(f"unexpected {spec.name} request during SASL handshake (listener "
                                    f"{session.listener.name} requires SASL authentication first)")
            if session.expired():
                raise ProtocolError(f"the SASL session of {session.principal} expired "
                                    "(connections.max.reauth.ms) without re-authentication")
        if not spec.min_version <= version <= spec.max_version:
            if api_key == API_VERSIONS_KEY:
                return self._api_versions_fallback(correlation_id)
            raise ProtocolError(
                f"unsupported version {version} of {spec.name} (supported {spec.min_version}-{spec.max_version})"
            )
        req_cls = request_class(api_key, version)
        header, offset = decode_request(frame, req_cls.__flexible__)
        codec_cpu = 0.0  # seconds the codec thread spent on this request, charged with the handler's
        limit = self.max_elements
        try:
            if len(frame) > offload.LARGE_FRAME_BYTES:
                (body, elements), codec_cpu = await offload.on_codec_thread(decode_body, frame, offset, req_cls,
                                                                           limit)
            else:
                body, elements = decode_body(frame, offset, req_cls, limit)
        except TooManyElements:
            self.broker.metrics.requests_refused.labels(spec.name, "elements").inc()
            raise
        response = await self._run(spec, header, body, peer, session, ordered, len(frame), codec_cpu, elements)
        if response is None:
            return None
        if isinstance(response, EncodedResponse):
            return response.chunks
        # ApiVersions responses always use header v0 so that any client can read them.
        flexible_header = response_class(api_key, version).__flexible__ and api_key != API_VERSIONS_KEY
        if elements > offload.LARGE_ANSWER_ELEMENTS:
            encoded, cpu = await offload.on_codec_thread(encode_response, correlation_id, response, flexible_header)
            self._charge(session, header, cpu)
            return [encoded]
        return [encode_response(correlation_id, response, flexible_header)]

    def _charge(self, session: Session, header: RequestHeader, seconds: float) -> None:
        """CPU spent on a request outside its handler (the codec thread's) counted against the principal's
        request_percentage quota; the throttle it earns holds the connection's next requests back."""
        if seconds <= 0 or not self.broker.quotas.limits(REQUEST_PERCENTAGE):
            return
        throttle = self.broker.quotas.record(REQUEST_PERCENTAGE, session.principal.name, header.client_id or "",
                                             seconds * 100)
        if throttle > 0:
            session.mute(throttle)

    async def call(self, body: Any, session: Session, client_id: str, size: int) -> Any:
        """A request made inside this broker for a client of another protocol (the REST Proxy, ADR 0034):
        the same checks, handler, ACLs, quotas and metrics as a request read from a connection, without
        encoding it. `size` stands for the frame's size (what producer_byte_rate counts). Returns the
        response entity (None for acks=0); ProtocolError where a connection would be closed."""
        api_key, version = int(body.__api_key__), int(body.__version__)
        spec = self.apis.get(api_key)
        if spec is None or not spec.min_version <= version <= spec.max_version:
            raise ProtocolError(f"unsupported request {type(body).__name__} v{version}")
        if not session.authenticated and not spec.access.public:
            raise ProtocolError(f"{spec.name} from an unauthenticated session")
        response = await self._run(spec, RequestHeader(api_key, version, 0, client_id), body, session.host, session,
                                   None, size)
        if isinstance(response, EncodedResponse):
            from .client import decode_response

            return decode_response(api_key, version, b"".join(bytes(c) for c in response.chunks)[4:])[1]
        return response

    async def _run(self, spec: ApiSpec, header: RequestHeader, body: Any, peer: str, session: Session,
                   ordered: asyncio.Future[None] | None, size: int, codec_cpu: float = 0.0,
                   elements: int = 0) -> Any:
        """The response to a decoded request: authorization of cluster-wide APIs, the handler (timed for
        request_percentage), latency metrics, throttling."""
        resp_cls = response_class(header.api_key, header.api_version)
        ctx = RequestContext(self.broker, header, resp_cls, peer, session, spec.access, ordered, spec.name,
                             size=size)
        started = time.perf_counter()
        required = spec.access.requires
        if required is not None and ctx.denied(required.operation, required.resource_type, CLUSTER_NAME):
            assert spec.access.refusal is not None
            refusal = (body, resp_cls, AUTHORIZATION_ERRORS[required.resource_type],
                       f"{required.operation.name} on the cluster is needed for {spec.name}")
            if elements > offload.LARGE_ANSWER_ELEMENTS:  # an entry per item refused: built off the loop
                response, _ = await offload.on_codec_thread(spec.access.refusal, *refusal)
            else:
                response = spec.access.refusal(*refusal)
        else:
            call: Any = spec.handler(ctx, body)
            timed = None
            if self.broker.quotas.limits(REQUEST_PERCENTAGE) and not _exempt_from_request_quota(spec, body):
                call = timed = TimedCoroutine(call)
            try:
                response = await call
            except UndeclaredCheck as exc:
                log.error("%s", exc)
                raise ProtocolError(f"{spec.name} is refused: {exc}") from exc
            if timed is not None:  # percent of one thread: the handler's time and its request's parsing
                ctx.record_quota(REQUEST_PERCENTAGE, (timed.seconds + codec_cpu) * 100)
        self.broker.metrics.request_latency.labels(spec.name).observe(time.perf_counter() - started)
        if ctx.throttle_s > 0:  # answered at once, with the throttle time (the connection is muted)
            response = _with_throttle(response, int(ctx.throttle_s * 1000))
        return response

    def _api_versions_fallback(self, correlation_id: int) -> list[bytes | memoryview]:
        """An ApiVersions request newer than ours gets a v0 answer with UNSUPPORTED_VERSION and
        our version ranges, so the client can retry with a version we know (KIP-511)."""
        cls = response_class(API_VERSIONS_KEY, 0)
        return [encode_response(correlation_id, api_versions_response(cls, self, ErrorCode.unsupported_version),
                                flexible_header=False)]


def _exempt_from_request_quota(spec: ApiSpec, body: Any) -> bool:
    """Kafka exempts what a client cannot do without (version and login exchanges) and the brokers'
    own traffic (a follower's fetch: its CLUSTER_ACTION is checked by the fetch itself)."""
    return spec.access.public or (spec.key == FETCH_KEY and getattr(body, "replica_id", -1) >= 0)


def _with_throttle(response: Any, throttle_ms: int) -> Any:
    if response is None:
        return None
    if isinstance(response, EncodedResponse):
        return response.with_throttle(throttle_ms)
    if hasattr(response, "throttle_time"):
        return dataclasses.replace(response, throttle_time=datetime.timedelta(milliseconds=throttle_ms))
    return response


def api_versions_response(cls: type, dispatcher: Dispatcher, error: ErrorCode = ErrorCode.none) -> Any:
    api_version = nested(cls, "ApiVersion")
    keys = tuple(api_version(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in dispatcher.advertised())
    return make(cls, error_code=error, api_keys=keys, throttle_time=ZERO)
