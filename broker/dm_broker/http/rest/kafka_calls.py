"""Kafka requests on behalf of an HTTP user (ADR 0034): run by this broker's own dispatcher when it is the
broker asked, with the user's session, or forwarded to another broker over the inter-broker listener."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...protocol.channels import BrokerChannels
from ...security.session import Session

if TYPE_CHECKING:
    from ...broker import Broker

CONNECTIONS_PER_BROKER = 4  # a forwarded acks=all produce holds its connection until the ISR has it
CLIENT_ID = "dm-rest-proxy"


class BrokerUnreachable(ConnectionError):
    pass


class KafkaCalls:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        # channels of their own: a produce waiting for its ISR must not hold up transaction markers
        self.channels = BrokerChannels(broker.broker_address, CLIENT_ID, broker.security.client,
                                       per_broker=CONNECTIONS_PER_BROKER)

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
        try:
            return await self.channels.request(node_id, body, timeout)
        except ConnectionError as exc:
            raise BrokerUnreachable(str(exc)) from None

    async def close(self) -> None:
        await self.channels.close()
