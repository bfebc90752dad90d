"""`dm quotas list|set|delete`: client quotas (producer_byte_rate, consumer_byte_rate,
request_percentage, controller_mutation_rate) on a user, a client id, or both — what Kafka's
`kafka-configs.sh --entity-type users/clients` does, over the same APIs (DescribeClientQuotas,
AlterClientQuotas)."""

from __future__ import annotations

import argparse

from ..quotas.entities import CLIENT_ID, QUOTA_KEYS, USER
from .wire_admin import AdminError, WireAdmin, run

DEFAULT = "<default>"


def _entity(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    entity = []
    if args.user is not None:
        entity.append((USER, None if args.user == DEFAULT else args.user))
    if args.client_id is not None:
        entity.append((CLIENT_ID, None if args.client_id == DEFAULT else args.client_id))
    return entity


def _show(entity: list[tuple[str, str | None]]) -> str:
    ordered = sorted(entity, key=lambda part: part[0] != USER)  # user first, as Kafka's tools print
    return " ".join(f"{t}={DEFAULT if n is None else n}" for t, n in ordered)


def _list(args: argparse.Namespace) -> None:
    try:
        found = run(args.bootstrap, lambda admin: admin.describe_quotas(_entity(args), strict=False))
    except AdminError as exc:
        raise SystemExit(f"dm quotas list: {exc}") from None
    if not found:
        print("no client quotas")
    for entity, values in found:
        print(f"{_show(entity)}\t" + " ".join(f"{k}={v:.15g}" for k, v in sorted(values.items())))


def _parse_values(items: list[str]) -> dict[str, float | None]:
    values: dict[str, float | None] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in QUOTA_KEYS:
            known = ", ".join(sorted(QUOTA_KEYS))
            raise SystemExit(f"dm quotas set: {item!r} is not QUOTA=VALUE, QUOTA one of {known}")
        try:
            values[key] = float(text)
        except ValueError:
            raise SystemExit(f"dm quotas set: {text!r} is not a number") from None
    return values


def _alter(args: argparse.Namespace, values: dict[str, float | None]) -> None:
    entity = _entity(args)
    if not entity:
        raise SystemExit(f"dm quotas {args.action}: name --user and/or --client-id ({DEFAULT} for the default)")

    async def work(admin: WireAdmin) -> None:
        await admin.alter_quotas(entity, values)

    try:
        run(args.bootstrap, work)
    except AdminError as exc:
        raise SystemExit(f"dm quotas {args.action}: {exc}") from None
    print(f"{_show(entity)}: " + ", ".join(f"{k}={'removed' if v is None else f'{v:.15g}'}" for k, v in values.items()))


def _set(args: argparse.Namespace) -> None:
    _alter(args, _parse_values(args.values))


def _delete(args: argparse.Namespace) -> None:
    unknown = [k for k in args.quotas if k not in QUOTA_KEYS]
    if unknown:
        raise SystemExit(f"dm quotas delete: unknown quota {unknown[0]!r}")
    _alter(args, dict.fromkeys(args.quotas))


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("quotas", help="client quotas by user and/or client id (Kafka's KIP-13/55/546)")
    actions = p.add_subparsers(dest="action", required=True)
    for name, func, help_text in (
            ("list", _list, "the quotas set (of the entities named, or all)"),
            ("set", _set, "set quotas: QUOTA=VALUE ..."),
            ("delete", _delete, "remove quotas: QUOTA ...")):
        a = actions.add_parser(name, parents=[common], help=help_text)
        a.add_argument("--user", help=f"a user (the principal's name), or {DEFAULT}")
        a.add_argument("--client-id", help=f"a client id, or {DEFAULT}")
        if name == "set":
            a.add_argument("values", nargs="+", metavar="QUOTA=VALUE",
                           help="producer_byte_rate, consumer_byte_rate (bytes/s), request_percentage (%% of a "
                                "thread), controller_mutation_rate (partitions/s)")
        if name == "delete":
            a.add_argument("quotas", nargs="+", metavar="QUOTA", help="the quotas to remove, e.g. producer_byte_rate")
        a.set_defaults(func=func)
