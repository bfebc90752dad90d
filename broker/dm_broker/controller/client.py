"""How a broker reaches the controller: in-process (standalone broker) or over HTTP/JSON."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Callable
from typing import Protocol, TypeVar

import aiohttp
from pydantic import BaseModel, ValidationError

from ..security.acls import AclBinding, AclFilter
from ..tasks import cancelling
from .controller import Controller, ControllerError
from .models import (
    AclDeleteRequest,
    AclDeleteResults,
    AclResults,
    AclsRequest,
    AlterConfigsRequest,
    AlterIsrBatch,
    AlterIsrBatchResponse,
    AlterIsrRequest,
    AlterIsrResponse,
    BrokerConfigsRequest,
    ClusterDoc,
    ClusterInfo,
    ClusterMetadata,
    CreatePartitionsRequest,
    CreateTopicRequest,
    ElectLeadersRequest,
    GroupConfigsRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    PartitionResult,
    PartitionResults,
    ProducerIdBlock,
    QuotaAlteration,
    QuotaRequest,
    QuotaResult,
    QuotaResults,
    ReassignmentRequest,
    ReassignmentsRequest,
    RegisterRequest,
    RegisterResponse,
    ScramAlteration,
    ScramRequest,
    ScramResult,
    ScramResults,
    TopicDoc,
)

log = logging.getLogger(__name__)
OFF_LOOP_BYTES = 256 * 1024  # answers larger than this are parsed and validated in a worker thread


def _json_object(body: bytes) -> object:
    """The parsed body, or None when it is not JSON (a proxy's or a starting server's page)."""
    try:
        return json.loads(body)
    except ValueError:  # UnicodeDecodeError included
        return None

M = TypeVar("M", bound=BaseModel)


class ControllerUnavailable(Exception):
    """The controller could not be reached; callers retry or report COORDINATOR/NOT_CONTROLLER."""


class ControllerClient(Protocol):
    async def cluster_info(self) -> ClusterInfo: ...
    async def register(self, req: RegisterRequest) -> RegisterResponse: ...
    async def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResponse: ...
    async def metadata(self, known_version: int, incarnation: str, wait_s: float,
                       delta: bool = False) -> ClusterMetadata: ...
    async def alter_isr_batch(self, reqs: list[AlterIsrRequest]) -> list[AlterIsrResponse]: ...
    async def create_topic(self, req: CreateTopicRequest) -> TopicDoc: ...
    async def delete_topic(self, name: str) -> TopicDoc: ...
    async def create_partitions(self, name: str, req: CreatePartitionsRequest) -> TopicDoc: ...
    async def alter_configs(self, name: str, req: AlterConfigsRequest) -> TopicDoc: ...
    async def allocate_producer_ids(self) -> ProducerIdBlock: ...
    async def controlled_shutdown(self, node_id: int, broker_epoch: int) -> list[tuple[str, int]]: ...
    async def hold_session(self, node_id: int, broker_epoch: int, opened: Callable[[], None]) -> None: ...
    async def alter_reassignments(self, reqs: list[ReassignmentRequest]) -> list[PartitionResult]: ...
    async def elect_leaders(self, req: ElectLeadersRequest) -> list[PartitionResult]: ...
    async def alter_broker_configs(self, req: BrokerConfigsRequest) -> ClusterDoc: ...
    async def alter_group_configs(self, req: GroupConfigsRequest) -> ClusterDoc: ...
    async def create_acls(self, acls: list[AclBinding]) -> list[str | None]: ...
    async def delete_acls(self, filters: list[AclFilter]) -> list[list[AclBinding]]: ...
    async def alter_scram(self, alterations: list[ScramAlteration]) -> list[ScramResult]: ...
    async def alter_quotas(self, alterations: list[QuotaAlteration], validate_only: bool) -> list[QuotaResult]: ...
    async def close(self) -> None: ...


class LocalControllerClient:
    """Direct calls into a controller running in the same process."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    async def cluster_info(self) -> ClusterInfo:
        return self.controller.cluster_info()

    async def register(self, req: RegisterRequest) -> RegisterResponse:
        return await self.controller.register(req)

    async def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResponse:
        return await self.controller.heartbeat(req)

    async def metadata(self, known_version: int, incarnation: str, wait_s: float,
                       delta: bool = False) -> ClusterMetadata:
        return await self.controller.wait_for_change(known_version, incarnation, wait_s, delta)

    async def alter_isr_batch(self, reqs: list[AlterIsrRequest]) -> list[AlterIsrResponse]:
        return await self.controller.alter_isr_batch(reqs)

    async def create_topic(self, req: CreateTopicRequest) -> TopicDoc:
        return await self.controller.create_topic(req)

    async def delete_topic(self, name: str) -> TopicDoc:
        return await self.controller.delete_topic(name)

    async def create_partitions(self, name: str, req: CreatePartitionsRequest) -> TopicDoc:
        return await self.controller.create_partitions(name, req)

    async def alter_configs(self, name: str, req: AlterConfigsRequest) -> TopicDoc:
        return await self.controller.alter_configs(name, req.configs, req.validate_only)

    async def allocate_producer_ids(self) -> ProducerIdBlock:
        return await self.controller.allocate_producer_ids()

    async def controlled_shutdown(self, node_id: int, broker_epoch: int) -> list[tuple[str, int]]:
        return await self.controller.controlled_shutdown(node_id, broker_epoch)

    async def hold_session(self, node_id: int, broker_epoch: int, opened: Callable[[], None]) -> None:
        """In one process the controller outlives the broker: there is no connection to lose."""
        opened()
        await asyncio.Event().wait()

    async def alter_reassignments(self, reqs: list[ReassignmentRequest]) -> list[PartitionResult]:
        return await self.controller.alter_reassignments(reqs)

    async def elect_leaders(self, req: ElectLeadersRequest) -> list[PartitionResult]:
        return await self.controller.elect_leaders(req.unclean, req.partitions)

    async def alter_broker_configs(self, req: BrokerConfigsRequest) -> ClusterDoc:
        return await self.controller.alter_broker_configs(req)

    async def alter_group_configs(self, req: GroupConfigsRequest) -> ClusterDoc:
        return await self.controller.alter_group_configs(req)

    async def create_acls(self, acls: list[AclBinding]) -> list[str | None]:
        return await self.controller.create_acls(acls)

    async def delete_acls(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        return await self.controller.delete_acls(filters)

    async def alter_scram(self, alterations: list[ScramAlteration]) -> list[ScramResult]:
        return await self.controller.alter_scram(alterations)

    async def alter_quotas(self, alterations: list[QuotaAlteration], validate_only: bool) -> list[QuotaResult]:
        return await self.controller.alter_quotas(alterations, validate_only)

    async def close(self) -> None:
        await self.controller.close()


class HttpControllerClient:
    """`ssl_context`: how an https controller is verified (and, for mTLS, who this broker is)."""

    def __init__(self, url: str, token: str = "", timeout_s: float = 10,
                 ssl_context: ssl.SSLContext | None = None, server_name: str = "") -> None:
        self.url = url.rstrip("/")
        # the name the controller's certificate is checked against (and sent as SNI), if not the URL's host
        self.server_name = server_name or None
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout = timeout_s
        self.ssl_context = ssl_context
        self._session: aiohttp.ClientSession | None = None

    def _sess(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self.ssl_context) if self.ssl_context is not None else None
            self._session = aiohttp.ClientSession(headers=self.headers, connector=connector)
        return self._session

    def _reset(self) -> None:
        """Drops every connection (the session's requests in flight fail and are retried)."""
        session, self._session = self._session, None
        if session is not None and not session.closed:
            asyncio.get_running_loop().create_task(session.close())

    async def _call(self, method: str, path: str, body=None, timeout: float | None = None, params=None,
                    answer: type[M] | None = None):
        """The controller's JSON object for a request (parsed as `answer` when given). Anything that is
        not the controller's answer (no connection, a timeout, a body that is not a JSON object of the
        expected shape: a proxy's or a starting server's) is ControllerUnavailable, which callers
        retry; a refusal the controller gave is ControllerError."""
        try:
            async with self._sess().request(
                method, self.url + path, json=body.model_dump() if body is not None else None, params=params,
                timeout=aiohttp.ClientTimeout(total=timeout or self.timeout), server_hostname=self.server_name,
            ) as resp:
                raw = await resp.read()
                # A metadata answer at 10,000 partitions is ~2 MB: parsed on the loop it stalled the broker
                # for 0.3 s; in a thread the loop keeps its turn every GIL switch interval.
                off_loop = len(raw) > OFF_LOOP_BYTES
                data = await asyncio.to_thread(_json_object, raw) if off_loop else _json_object(raw)
                if resp.status == 401 or not isinstance(data, dict) or resp.status >= 500 or resp.status == 404:
                    # Not the controller's answer: whoever gave it (a standby operator, a server still
                    # starting) must not get the next requests too, as the pooled keep-alive connections
                    # would make it. Without them, the next requests go through the Service again, to
                    # whoever serves the controller now.
                    self._reset()
                if resp.status == 401:
                    raise ControllerUnavailable("the controller refused our token")
                if not isinstance(data, dict) or resp.status == 404:
                    raise ControllerUnavailable(f"{method} {path}: HTTP {resp.status} without a controller's answer")
                if resp.status >= 500:
                    raise ControllerUnavailable(f"{method} {path}: {data.get('message', resp.status)}")
                if resp.status >= 400:
                    raise ControllerError(data.get("error", "unknown_server_error"), data.get("message", str(data)))
                if answer is None:
                    return data
                return await asyncio.to_thread(answer.model_validate, data) if off_loop else answer.model_validate(data)
        except ValidationError as exc:
            raise ControllerUnavailable(f"{method} {path}: not a controller's answer: {exc}") from None
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:  # ValueError: not JSON
            if cancelling():
                raise asyncio.CancelledError from exc
            raise ControllerUnavailable(f"{method} {path}: {exc}") from None

    async def cluster_info(self) -> ClusterInfo:
        return await self._call("GET", "/v1/cluster", answer=ClusterInfo)

    async def register(self, req: RegisterRequest) -> RegisterResponse:
        return await self._call("POST", "/v1/brokers/register", req, answer=RegisterResponse)

    async def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResponse:
        return await self._call("POST", "/v1/brokers/heartbeat", req, answer=HeartbeatResponse)

    async def metadata(self, known_version: int, incarnation: str, wait_s: float,
                       delta: bool = False) -> ClusterMetadata:
        params = {"version": str(known_version), "incarnation": incarnation, "wait_ms": str(int(wait_s * 1000))}
        if delta:  # a controller of the previous release ignores it and answers whole
            params["delta"] = "1"
        return await self._call("GET", "/v1/metadata", params=params, timeout=wait_s + self.timeout,
                                answer=ClusterMetadata)

    async def alter_isr_batch(self, reqs: list[AlterIsrRequest]) -> list[AlterIsrResponse]:
        # A batch waits for the changes queued before it to be stored too: longer than one request.
        answer = await self._call("POST", "/v1/isr/batch", AlterIsrBatch(changes=reqs), timeout=3 * self.timeout,
                                  answer=AlterIsrBatchResponse)
        if len(answer.responses) != len(reqs):
            raise ControllerUnavailable(f"POST /v1/isr/batch: {len(answer.responses)} answers to {len(reqs)} changes")
        return answer.responses

    async def create_topic(self, req: CreateTopicRequest) -> TopicDoc:
        return await self._call("POST", "/v1/topics", req, answer=TopicDoc)

    async def delete_topic(self, name: str) -> TopicDoc:
        return await self._call("DELETE", f"/v1/topics/{name}", answer=TopicDoc)

    async def create_partitions(self, name: str, req: CreatePartitionsRequest) -> TopicDoc:
        return await self._call("POST", f"/v1/topics/{name}/partitions", req, answer=TopicDoc)

    async def alter_configs(self, name: str, req: AlterConfigsRequest) -> TopicDoc:
        return await self._call("PUT", f"/v1/topics/{name}/configs", req, answer=TopicDoc)

    async def allocate_producer_ids(self) -> ProducerIdBlock:
        return await self._call("POST", "/v1/producer-ids", answer=ProducerIdBlock)

    async def controlled_shutdown(self, node_id: int, broker_epoch: int) -> list[tuple[str, int]]:
        data = await self._call("POST", f"/v1/brokers/{node_id}/shutdown", params={"epoch": str(broker_epoch)})
        still_leading = data.get("still_leading")
        if not isinstance(still_leading, list):
            raise ControllerUnavailable(f"controlled shutdown: not a controller's answer: {data}")
        return [tuple(x) for x in still_leading]

    async def alter_reassignments(self, reqs: list[ReassignmentRequest]) -> list[PartitionResult]:
        return (await self._call("POST", "/v1/reassignments", ReassignmentsRequest(reassignments=reqs),
                                 answer=PartitionResults)).results

    async def elect_leaders(self, req: ElectLeadersRequest) -> list[PartitionResult]:
        return (await self._call("POST", "/v1/elections", req, answer=PartitionResults)).results

    async def alter_broker_configs(self, req: BrokerConfigsRequest) -> ClusterDoc:
        return await self._call("PUT", "/v1/broker-configs", req, answer=ClusterDoc)

    async def alter_group_configs(self, req: GroupConfigsRequest) -> ClusterDoc:
        return await self._call("PUT", "/v1/group-configs", req, answer=ClusterDoc)

    async def create_acls(self, acls: list[AclBinding]) -> list[str | None]:
        return (await self._call("POST", "/v1/acls", AclsRequest(acls=acls), answer=AclResults)).errors

    async def delete_acls(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        return (await self._call("POST", "/v1/acls/delete", AclDeleteRequest(filters=filters),
                                 answer=AclDeleteResults)).deleted

    async def alter_scram(self, alterations: list[ScramAlteration]) -> list[ScramResult]:
        return (await self._call("POST", "/v1/scram", ScramRequest(alterations=alterations),
                                 answer=ScramResults)).results

    async def alter_quotas(self, alterations: list[QuotaAlteration], validate_only: bool) -> list[QuotaResult]:
        return (await self._call("POST", "/v1/quotas", QuotaRequest(alterations=alterations,
                                                                    validate_only=validate_only),
                                 answer=QuotaResults)).results

    async def hold_session(self, node_id: int, broker_epoch: int, opened: Callable[[], None]) -> None:
        """Keeps the session WebSocket open (`opened` is called once it is); returns when it
        closes (the controller went away)."""
        try:
            async with self._sess().ws_connect(f"{self.url}/v1/brokers/{node_id}/session",
                                               params={"epoch": str(broker_epoch)},
                                               timeout=aiohttp.ClientWSTimeout(ws_close=2)) as ws:
                opened()
                async for msg in ws:
                    if msg.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                        break
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            if cancelling():
                raise asyncio.CancelledError from exc
            raise ControllerUnavailable(f"session: {exc}") from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
