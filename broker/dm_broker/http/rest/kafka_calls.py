"""Kafka requests on behalf of an HTTP user (ADR 0034): run by this broker's own dispatcher when it is the
broker asked, with the user's session, or forwarded to another broker over the inter-broker listener."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from ...protocol.client import KafkaConnection
from ...security.session import Session

if TYPE_CHECKING:
    from ...broker import Broker

CONNECTIONS_PER_BROKER = 4  # a forwarded acks=all produce holds its connection until the ISR has it
CLIENT_ID = "dm-rest-proxy"


class BrokerUnreachable(ConnectionError):
    pass


class _Pool:
    """Connections to one broker; each carries one request at a time (answers come in order)."""

    def __init__(self) -> None:
        self.idle: list[KafkaConnection] = []
        self.slots = asyncio.Semaphore(CONNECTIONS_PER_BROKER)
        self.address: tuple[str, int] | None = None


class KafkaCalls:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._pools: dict[int, _Pool] = {}

    async def call(self, node_id: int, body: Any, session: Session, timeout: float, size: int = 0) -> Any:
        """The response to `body`, asked of broker `node_id` (`size`: the bytes it carries, for quotas).
        BrokerUnreachable when it cannot be asked or did not answer (for a produce: the records may or may
        not have been written)."""
        if node_id == self.broker.node_id:
            # no timeout of its own: the request's handler keeps the request's (a Produce's timeout)
            response = await self.broker.dispatcher.call(body, session, CLIENT_ID, size)
            if response is None:
                raise BrokerUnreachable("the request got no answer")
            return response
        return await self._forward(node_id, body, timeout)

    async def _forward(self, node_id: int, body: Any, timeout: float) -> Any:
        info = next((b for b in self.broker.metadata.brokers if b.node_id == node_id), None) \
            if self.broker.metadata is not None else None
        if info is None:
            raise BrokerUnreachable(f"broker {node_id} is not registered")
        pool = self._pools.setdefault(node_id, _Pool())
        if pool.address != (info.host, info.port):  # the broker moved: forget connections to the old place
            await self._drop(pool)
            pool.address = (info.host, info.port)
        async with pool.slots:
            conn = None
            while pool.idle and conn is None:  # one the other broker closed (it restarted) is dropped unused
                conn = pool.idle.pop()
                transport = conn.conn.transport
                if transport is None or transport.is_closing():
                    conn.conn.abort()
                    conn = None
            try:
                if conn is None:
                    conn = await KafkaConnection.open(info.host, info.port, CLIENT_ID, timeout=min(timeout, 10),
                                                      security=self.broker.security.client)
                response = await conn.request(body, timeout=timeout)
            # RuntimeError: uvloop's answer to a write on a transport that closed meanwhile
            except (OSError, ConnectionError, TimeoutError, asyncio.IncompleteReadError, RuntimeError) as exc:
                if conn is not None:
                    await conn.close(0)
                raise BrokerUnreachable(f"broker {node_id} at {info.host}:{info.port}: "
                                        f"{exc or type(exc).__name__}") from None
            except BaseException:  # cancelled mid-request: the connection's next answer would be this one's
                if conn is not None:
                    conn.conn.abort()
                raise
            pool.idle.append(conn)
            return response

    @staticmethod
    async def _drop(pool: _Pool) -> None:
        idle, pool.idle = pool.idle, []
        for conn in idle:
            with contextlib.suppress(Exception):
                await conn.close(0)

    async def close(self) -> None:
        for pool in self._pools.values():
            await self._drop(pool)
