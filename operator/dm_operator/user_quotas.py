"""A User resource's client quotas as the cluster holds them on its user entity (pure)."""

from __future__ import annotations

from dm_broker.controller.models import QuotaOp
from dm_broker.quotas.entities import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    ClientQuota,
    entity_key,
)

from .models import UserSpec

FIELDS = {"producerByteRate": PRODUCER_BYTE_RATE, "consumerByteRate": CONSUMER_BYTE_RATE,
          "requestPercentage": REQUEST_PERCENTAGE, "controllerMutationRate": CONTROLLER_MUTATION_RATE}


def wanted(spec: UserSpec) -> dict[str, float]:
    if spec.quotas is None:
        return {}
    return {key: float(value) for field, key in FIELDS.items()
            if (value := getattr(spec.quotas, field)) is not None}


def held(quotas: list[ClientQuota], user: str) -> dict[str, float]:
    key = entity_key({USER: user})
    return next((dict(q.values) for q in quotas if q.key == key), {})


def ops(current: dict[str, float], desired: dict[str, float]) -> list[QuotaOp]:
    """What makes the user's quotas exactly `desired` (nothing when they are)."""
    return [*(QuotaOp(key=k, value=v) for k, v in desired.items() if current.get(k) != v),
            *(QuotaOp(key=k, remove=True) for k in current if k not in desired)]
