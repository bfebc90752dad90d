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
    from ..security.setup import ClientSecurity

log = logging.getLogger(__name__)
Endpoint = Callable[[int], tuple[str, int] | None]


class BrokerChannels:
    def __init__(self, endpoint: Endpoint, client_id: str, security: ClientSecurity | None = None) -> None:
        self.endpoint = endpoint
        self.client_id = client_id
        self.security = security
        self._conns: dict[int, KafkaConnection] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def _connection(self, node_id: int) -> KafkaConnection:
        conn = self._conns.get(node_id)
        if conn is not None:
            return conn
        lock = self._locks.setdefault(node_id, asyncio.Lock())
        async with lock:
            conn = self._conns.get(node_id)
            if conn is None:
                address = self.endpoint(node_id)
                if address is None:
                    raise ConnectionError(f"broker {node_id} is not serving")
                conn = await KafkaConnection.open(*address, client_id=self.client_id, timeout=5,
                                                  security=self.security)
                self._conns[node_id] = conn
            return conn

    async def request(self, node_id: int, body: Any, timeout: float = 30) -> Any:
        try:
            conn = await self._connection(node_id)
        except (OSError, TimeoutError) as exc:
            raise ConnectionError(f"cannot connect to broker {node_id}: {exc!r}") from None
        try:
            return await conn.request(body, timeout)
        except (OSError, ConnectionError, TimeoutError, asyncio.IncompleteReadError, RuntimeError) as exc:
            # RuntimeError: the transport was closed under the connection (the broker went away).
            await self._drop(node_id, conn)
            raise ConnectionError(f"request to broker {node_id} failed: {exc!r}") from None

    async def _drop(self, node_id: int, conn: KafkaConnection) -> None:
        if self._conns.get(node_id) is conn:
            del self._conns[node_id]
        with contextlib.suppress(Exception):
            await conn.close()

    async def close(self) -> None:
        for node_id, conn in list(self._conns.items()):
            await self._drop(node_id, conn)
