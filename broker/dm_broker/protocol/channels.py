"""Requests from this broker to another one over the Kafka protocol (transaction markers, the
verification of transactional writes): one connection per broker, opened on first use and again after
a failure. A request to a broker the metadata does not list, or whose connection fails, raises
ConnectionError; the caller retries or answers with a retriable error."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .client import KafkaConnection

if TYPE_CHECKING:
    from ..security.client_security import ClientSecurity

log = logging.getLogger(__name__)
Endpoint = Callable[[int], tuple[str, int] | None]


class BrokerChannels:
    """`per_broker` connections to each broker at most, each carrying one request at a time (answers come in
    order); a connection the other broker closed is replaced before use, and one whose request was cancelled
    is aborted (its answer would be read as the next request's)."""

    def __init__(self, endpoint: Endpoint, client_id: str, security: ClientSecurity | None = None,
                 per_broker: int = 1) -> None:
        self.endpoint = endpoint
        self.client_id = client_id
        self.security = security
        self.per_broker = per_broker
        self._idle: dict[int, list[KafkaConnection]] = {}
        self._slots: dict[int, asyncio.Semaphore] = {}
        self._open: set[KafkaConnection] = set()

    async def _connection(self, node_id: int) -> KafkaConnection:
        idle = self._idle.setdefault(node_id, [])
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
            await self._discard(conn)
        address = self.endpoint(node_id)
        if address is None:
            raise ConnectionError(f"broker {node_id} is not serving")
        try:
            conn = await KafkaConnection.open(*address, client_id=self.client_id, timeout=5, security=self.security)
        except (OSError, TimeoutError) as exc:
            raise ConnectionError(f"cannot connect to broker {node_id}: {exc!r}") from None
        self._open.add(conn)
        return conn

    async def request(self, node_id: int, body: Any, timeout: float = 30) -> Any:
        async with self._slots.setdefault(node_id, asyncio.Semaphore(self.per_broker)):
            conn = await self._connection(node_id)
            try:
                response = await conn.request(body, timeout)
            except (OSError, ConnectionError, TimeoutError, asyncio.IncompleteReadError) as exc:
                await self._discard(conn)
                raise ConnectionError(f"request to broker {node_id} failed: {exc!r}") from None
            except BaseException:  # cancelled mid-request
                self._open.discard(conn)
                conn.abort()
                raise
            self._idle[node_id].append(conn)
            return response

    async def _discard(self, conn: KafkaConnection) -> None:
        self._open.discard(conn)
        with contextlib.suppress(Exception):
            await conn.close()

    async def close(self) -> None:
        self._idle.clear()
        for conn in list(self._open):
            await self._discard(conn)
