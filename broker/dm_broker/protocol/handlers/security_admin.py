"""CreateAcls, DescribeAcls, DeleteAcls (v1-3) and DescribeUserScramCredentials /
AlterUserScramCredentials (v0, KIP-554). ACLs and credentials live in the controller; a broker
forwards changes and answers descriptions from its metadata."""

from __future__ import annotations

from collections import Counter
from itertools import groupby
from typing import Any

from kio.schema.errors import ErrorCode

from ...errors import KafkaError
from ...security.acls import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from ...security.scram import MECHANISM_IDS, from_salted_password
from ..build import ZERO, make, nested
from ..dispatch import RequestContext

NO_AUTHORIZER = "No Authorizer is configured on the broker (authorizer.class.name)"


def _acl_refusal(ctx: RequestContext) -> tuple[ErrorCode, str] | None:
    """Why an ACL request is refused as a whole once the dispatcher let it through: no authorizer."""
    if not ctx.broker.security.authorization:
        return ErrorCode.security_disabled, NO_AUTHORIZER
    return None


# Refusals of a whole request (the dispatcher answers them when the cluster permission is missing).

def refuse_create_acls(req: Any, cls: type, error: ErrorCode, message: str) -> Any:
    result_cls = nested(cls, "AclCreationResult")
    return make(cls, throttle_time=ZERO, results=tuple(result_cls(error_code=error, error_message=message)
                                                       for _ in req.creations))


def refuse_delete_acls(req: Any, cls: type, error: ErrorCode, message: str) -> Any:
    result_cls = nested(cls, "DeleteAclsFilterResult")
    return make(cls, throttle_time=ZERO, filter_results=tuple(
        result_cls(error_code=error, error_message=message, matching_acls=()) for _ in req.filters))


def refuse_alter_user_scram_credentials(req: Any, cls: type, error: ErrorCode, message: str) -> Any:
    result_cls = nested(cls, "AlterUserScramCredentialsResult")
    users = list(dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions]))
    return make(cls, throttle_time=ZERO, results=tuple(result_cls(user=u, error_code=error, error_message=message)
                                                       for u in users))


def _binding(c: Any) -> AclBinding:
    """An ACL of a CreateAcls request; ValueError for codes outside Kafka's enums."""
    return AclBinding(resource_type=ResourceType(c.resource_type), resource_name=c.resource_name,
                      pattern_type=PatternType(getattr(c, "resource_pattern_type", PatternType.LITERAL)),
                      principal=c.principal, host=c.host, operation=Operation(c.operation),
                      permission=Permission(c.permission_type))


def _filter(f: Any) -> AclFilter:
    return AclFilter(resource_type=ResourceType(f.resource_type_filter), resource_name=f.resource_name_filter,
                     pattern_type=PatternType(getattr(f, "pattern_type_filter", PatternType.LITERAL)),
                     principal=f.principal_filter, host=f.host_filter, operation=Operation(f.operation),
                     permission=Permission(f.permission_type))


def _filter_refusal(f: AclFilter) -> str | None:
    if ResourceType.UNKNOWN in (f.resource_type,) or f.pattern_type == PatternType.UNKNOWN \
            or f.operation == Operation.UNKNOWN or f.permission == Permission.UNKNOWN:
        return "the filter has an UNKNOWN resource type, pattern type, operation or permission"
    return None


async def handle_create_acls(ctx: RequestContext, req: Any) -> Any:
    result_cls = nested(ctx.response_cls, "AclCreationResult")

    async def all_(code: ErrorCode, message: str) -> Any:
        return make(ctx.response_cls, throttle_time=ZERO, results=await ctx.built(
            req.creations, lambda _: result_cls(error_code=code, error_message=message)))

    refusal = _acl_refusal(ctx)
    if refusal is not None:
        return await all_(*refusal)
    bindings: list[AclBinding | None] = []
    for c in req.creations:
        await ctx.turn()
        try:
            bindings.append(_binding(c))
        except ValueError:
            bindings.append(None)
    valid = [b for b in bindings if b is not None]
    try:
        errors = iter(await ctx.broker.create_acls(valid) if valid else [])
    except KafkaError as exc:
        return await all_(exc.code, exc.message or exc.code.name)
    results = []
    for b in bindings:
        await ctx.turn()
        error = "unknown resource type, pattern type, operation or permission" if b is None else next(errors)
        results.append(result_cls(error_code=ErrorCode.invalid_request if error else ErrorCode.none,
                                  error_message=error))
    return make(ctx.response_cls, throttle_time=ZERO, results=tuple(results))


async def handle_describe_acls(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls

    def error(code: ErrorCode, message: str) -> Any:
        return make(cls, throttle_time=ZERO, error_code=code, error_message=message, resources=())

    refusal = _acl_refusal(ctx)
    if refusal is not None:
        return error(*refusal)
    try:
        f = _filter(req)
    except ValueError:
        return error(ErrorCode.invalid_request, "unknown resource type, pattern type, operation or permission")
    refusal = _filter_refusal(f)
    if refusal:
        return error(ErrorCode.invalid_request, refusal)
    acls = [a for a in ctx.broker.security.authorizer.acls if f.matches(a)]
    resource_cls, acl_cls = nested(cls, "DescribeAclsResource"), nested(cls, "AclDescription")

    def key(a: AclBinding) -> tuple:
        return a.resource_type, a.resource_name, a.pattern_type

    resources = tuple(
        make(resource_cls, resource_type=rt, resource_name=name, pattern_type=pt,
             acls=tuple(acl_cls(principal=a.principal, host=a.host, operation=a.operation,
                                permission_type=a.permission) for a in group))
        for (rt, name, pt), group in ((k, list(g)) for k, g in groupby(sorted(acls, key=key), key=key)))
    return make(cls, throttle_time=ZERO, error_code=ErrorCode.none, error_message=None, resources=resources)


async def handle_delete_acls(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    result_cls, match_cls = nested(cls, "DeleteAclsFilterResult"), nested(cls, "DeleteAclsMatchingAcl")

    async def all_(code: ErrorCode, message: str) -> Any:
        return make(cls, throttle_time=ZERO, filter_results=await ctx.built(
            req.filters, lambda _: result_cls(error_code=code, error_message=message, matching_acls=())))

    refusal = _acl_refusal(ctx)
    if refusal is not None:
        return await all_(*refusal)
    filters: list[AclFilter | str] = []
    for raw in req.filters:
        await ctx.turn()
        try:
            f = _filter(raw)
            filters.append(_filter_refusal(f) or f)
        except ValueError:
            filters.append("unknown resource type, pattern type, operation or permission")
    valid = [f for f in filters if isinstance(f, AclFilter)]
    try:
        deleted = iter(await ctx.broker.delete_acls(valid) if valid else [])
    except KafkaError as exc:
        return await all_(exc.code, exc.message or exc.code.name)
    results = []
    for f in filters:
        await ctx.turn()
        if isinstance(f, str):
            results.append(result_cls(error_code=ErrorCode.invalid_request, error_message=f, matching_acls=()))
            continue
        matched = tuple(make(match_cls, error_code=ErrorCode.none, error_message=None, resource_type=a.resource_type,
                             resource_name=a.resource_name, pattern_type=a.pattern_type, principal=a.principal,
                             host=a.host, operation=a.operation, permission_type=a.permission)
                        for a in next(deleted))
        await ctx.turn(len(matched))
        results.append(result_cls(error_code=ErrorCode.none, error_message=None, matching_acls=matched))
    return make(cls, throttle_time=ZERO, filter_results=tuple(results))


async def handle_describe_user_scram_credentials(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    result_cls, info_cls = nested(cls, "DescribeUserScramCredentialsResult"), nested(cls, "CredentialInfo")
    stored = ctx.broker.metadata.scram if ctx.broker.metadata is not None else {}
    ids = {name: i for i, name in MECHANISM_IDS.items()}
    wanted = [u.name for u in req.users] if req.users else sorted(stored)
    counts = Counter(wanted)
    results = []
    for user in counts:
        await ctx.turn()
        if counts[user] > 1:
            results.append(result_cls(user=user, error_code=ErrorCode.duplicate_resource,
                                      error_message=f"{user} is asked for more than once", credential_infos=()))
        elif user not in stored:
            results.append(result_cls(user=user, error_code=ErrorCode.resource_not_found,
                                      error_message=f"attempt to describe a user credential that does not exist: "
                                                    f"{user}", credential_infos=()))
        else:
            infos = tuple(info_cls(mechanism=ids[m], iterations=c.iterations) for m, c in sorted(stored[user].items()))
            results.append(result_cls(user=user, error_code=ErrorCode.none, error_message=None, credential_infos=infos))
    return make(cls, throttle_time=ZERO, error_code=ErrorCode.none, error_message=None, results=tuple(results))


async def handle_alter_user_scram_credentials(ctx: RequestContext, req: Any) -> Any:
    from ...controller.models import ScramAlteration

    cls = ctx.response_cls
    result_cls = nested(cls, "AlterUserScramCredentialsResult")
    users = list(dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions]))
    errors: dict[str, tuple[ErrorCode, str]] = {}
    alterations: list[ScramAlteration] = []
    for d in req.deletions:
        await ctx.turn()
        mechanism = MECHANISM_IDS.get(d.mechanism)
        if mechanism is None:
            errors.setdefault(d.name, (ErrorCode.unsupported_sasl_mechanism, f"unknown SCRAM mechanism {d.mechanism}"))
            continue
        alterations.append(ScramAlteration(user=d.name, mechanism=mechanism))
    for u in req.upsertions:
        await ctx.turn()
        mechanism = MECHANISM_IDS.get(u.mechanism)
        if mechanism is None:
            errors.setdefault(u.name, (ErrorCode.unsupported_sasl_mechanism, f"unknown SCRAM mechanism {u.mechanism}"))
            continue
        if not u.salt or not u.salted_password:
            errors.setdefault(u.name, (ErrorCode.unacceptable_credential, "the salt and salted password are needed"))
            continue
        credential = from_salted_password(mechanism, bytes(u.salt), bytes(u.salted_password), u.iterations)
        alterations.append(ScramAlteration(user=u.name, mechanism=mechanism, credential=credential,
                                           iterations=u.iterations))
    alterations = [a for a in alterations if a.user not in errors]
    if alterations:
        try:
            for r in await ctx.broker.alter_scram(alterations):
                if r.error is not None:
                    errors.setdefault(r.user, (ErrorCode[r.error], r.message or r.error))
        except KafkaError as exc:
            for a in alterations:
                errors.setdefault(a.user, (exc.code, exc.message or exc.code.name))
    results = await ctx.built(users, lambda u: result_cls(user=u, error_code=errors[u][0] if u in errors else
                                                          ErrorCode.none,
                                                          error_message=errors[u][1] if u in errors else None))
    return make(cls, throttle_time=ZERO, results=results)
