"""Where a broker is reached, per listener."""

from __future__ import annotations

from dataclasses import dataclass

from .controller.models import BrokerInfo


@dataclass(frozen=True)
class BrokerEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None


def endpoint_on(b: BrokerInfo, listener: str | None) -> BrokerEndpoint | None:
    """`b`'s endpoint on `listener` (None when it has no such listener: Kafka leaves such brokers out of
    what clients of that listener see); with no listener, the inter-broker endpoint."""
    if listener is None or not b.listeners:
        return BrokerEndpoint(b.node_id, b.host, b.port, b.rack)
    found = b.listeners.get(listener)
    return None if found is None else BrokerEndpoint(b.node_id, found.host, found.port, b.rack)
