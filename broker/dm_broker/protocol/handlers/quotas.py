"""DescribeClientQuotas and AlterClientQuotas (v0-1, KIP-546): client quotas live in the controller;
a broker forwards changes and describes them from its metadata."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import KafkaError
from ...quotas.entities import CLIENT_ID, IP, USER, matches
from ..build import ZERO, make, nested
from ..dispatch import RequestContext

EXACT, DEFAULT, ANY = 0, 1, 2


def refuse_alter_client_quotas(req: Any, cls: type, error: ErrorCode, message: str) -> Any:
    entry_cls, entity_cls = nested(cls, "EntryData"), nested(cls, "EntityData")
    return make(cls, throttle_time=ZERO, entries=tuple(
        entry_cls(error_code=error, error_message=message, entity=tuple(
            entity_cls(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity))
        for entry in req.entries))


def _filter_refusal(components: Any) -> str | None:
    types = [c.entity_type for c in components]
    if len(set(types)) != len(types):
        return f"entity type repeated in the filter {types}"
    types = [c.entity_type for c in components]
    if len(types) != len(set(types)):  # as Kafka: a filter names each entity type once (so at most three)
        return "Duplicate entity type in filter"
    for c in components:
        if c.entity_type not in (USER, CLIENT_ID, IP):
            return f"unknown entity type {c.entity_type!r}"
        if c.match_type not in (EXACT, DEFAULT, ANY):
            return f"unknown match type {c.match_type}"
        if c.match_type == EXACT and c.match is None:
            return "an exact match needs a name"
    return None


async def handle_describe_client_quotas(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    refusal = _filter_refusal(req.components)
    if refusal is not None:
        return make(cls, throttle_time=ZERO, error_code=ErrorCode.invalid_request, error_message=refusal,
                    entries=None)
    entry_cls, entity_cls, value_cls = nested(cls, "EntryData"), nested(cls, "EntityData"), nested(cls, "ValueData")
    components = [(c.entity_type, c.match_type, c.match) for c in req.components]
    stored = ctx.broker.metadata.quotas if ctx.broker.metadata is not None else []
    entries = tuple(
        entry_cls(entity=tuple(entity_cls(entity_type=t, entity_name=n) for t, n in q.key),
                  values=tuple(value_cls(key=k, value=v) for k, v in sorted(q.values.items())))
        for q in stored if matches(q.key, components, req.strict))
    return make(cls, throttle_time=ZERO, error_code=ErrorCode.none, error_message=None, entries=entries)


async def handle_alter_client_quotas(ctx: RequestContext, req: Any) -> Any:
    from ...controller.models import QuotaAlteration, QuotaOp

    cls = ctx.response_cls
    entry_cls, entity_cls = nested(cls, "EntryData"), nested(cls, "EntityData")
    alterations = []
    for entry in req.entries:
        await ctx.turn(1 + len(entry.entity) + len(entry.ops))
        alterations.append(QuotaAlteration(entity=[(e.entity_type, e.entity_name) for e in entry.entity],
                                           ops=[QuotaOp(key=op.key, value=float(op.value), remove=op.remove)
                                                for op in entry.ops]))
    try:
        outcomes = [(ErrorCode[r.error] if r.error else ErrorCode.none, r.message)
                    for r in await ctx.broker.alter_quotas(alterations, req.validate_only)]
    except KafkaError as exc:
        outcomes = [(exc.code, exc.message or exc.code.name)] * len(alterations)
    return make(cls, throttle_time=ZERO, entries=await ctx.built(
        zip(req.entries, outcomes, strict=True), lambda answered: entry_cls(
            error_code=answered[1][0], error_message=answered[1][1], entity=tuple(
                entity_cls(entity_type=e.entity_type, entity_name=e.entity_name) for e in answered[0].entity))))
