"""Quota entities and which quota applies to a client (pure).

Kafka's model: a quota is set on a user, a client id, or a user and client id together, each either
named or `<default>` (name None). A client (user U, client id C) gets, for each quota type, the first
of these that sets it (Kafka's DefaultQuotaCallback order):

    user=U,client-id=C  user=U,client-id=<default>  user=U
    user=<default>,client-id=C  user=<default>,client-id=<default>  user=<default>
    client-id=C  client-id=<default>

Clients that matched the same entity share one rate: a quota on user U holds all of U's client ids
together; a `<default>` part means each user (or client id) on its own.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
QUOTA_KEYS = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE})

# An entity as a sorted tuple of (type, name or None for <default>): hashable, one spelling per entity.
EntityKey = tuple[tuple[str, str | None], ...]


class ClientQuota(BaseModel):
    """One entity's quotas, as the controller stores them."""

    entity: dict[str, str | None]  # entity type -> name, None for <default>
    values: dict[str, float] = Field(default_factory=dict)

    @property
    def key(self) -> EntityKey:
        return entity_key(self.entity)


def entity_key(entity: dict[str, str | None]) -> EntityKey:
    return tuple(sorted(entity.items()))


def entity_refusal(entity: list[tuple[str, str | None]]) -> str | None:
    """Why Kafka would refuse this entity in AlterClientQuotas (None: acceptable)."""
    types = [t for t, _ in entity]
    if not types:
        return "an entity needs at least one of user, client-id"
    if len(set(types)) != len(types):
        return f"entity type repeated in {types}"
    if IP in types:
        return "ip quotas (connection_creation_rate) are not supported by dm; use max.connections.per.ip"
    unknown = [t for t in types if t not in (USER, CLIENT_ID)]
    if unknown:
        return f"unknown entity type {unknown[0]!r} (user, client-id)"
    return None


def value_refusal(key: str, value: float | None) -> str | None:
    """Why Kafka would refuse setting `key` to `value` (None: removing it, which needs a known key only)."""
    if key not in QUOTA_KEYS:
        return f"unknown quota {key!r} (one of {', '.join(sorted(QUOTA_KEYS))})"
    if value is None:
        return None
    if not value > 0:
        return f"{key} must be positive, got {value}"
    if key in (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE) and value != int(value):
        return f"{key} is a whole number of bytes per second, got {value}"
    return None


def _candidates(user: str, client_id: str) -> list[EntityKey]:
    u, c, d = user, client_id, None
    return [
        ((CLIENT_ID, c), (USER, u)), ((CLIENT_ID, d), (USER, u)), ((USER, u),),
        ((CLIENT_ID, c), (USER, d)), ((CLIENT_ID, d), (USER, d)), ((USER, d),),
        ((CLIENT_ID, c),), ((CLIENT_ID, d),),
    ]


SensorKey = tuple[str, str]  # (user, client id) the shared rate is kept under; "" where the entity has no part


def applicable(quotas: dict[EntityKey, dict[str, float]], user: str, client_id: str,
               quota: str) -> tuple[float, SensorKey] | None:
    """The bound of `quota` for a client and the key its rate is kept under, or None (unlimited)."""
    for key in _candidates(user, client_id):
        values = quotas.get(key)
        if values is not None and quota in values:
            types = {t for t, _ in key}
            return values[quota], (user if USER in types else "", client_id if CLIENT_ID in types else "")
    return None


def matches(entity: EntityKey, components: list[tuple[str, int, str | None]], strict: bool) -> bool:
    """DescribeClientQuotas' filter: each component (type, match type 0 exact / 1 default / 2 any,
    name) must match a part of the entity; strict, the entity has no other parts."""
    parts = dict(entity)
    for entity_type, match_type, name in components:
        if entity_type not in parts:
            return False
        if match_type == 0 and parts[entity_type] != name:
            return False
        if match_type == 1 and parts[entity_type] is not None:
            return False
    return not strict or len(parts) == len(components)
