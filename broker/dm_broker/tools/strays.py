"""`dm strays list|delete`: the logs a broker kept aside because no recorded decision allowed deleting
them (ADR 0017). It works on the broker's log directories themselves (run it where they are mounted:
on the host, or `kubectl exec <broker pod> -- dm strays ...`); a running broker never reads its strays,
so they can be removed while it serves."""

from __future__ import annotations

import argparse
import getpass
import socket
from pathlib import Path

from ..config import BrokerConfig, ConfigError
from ..log import strays


def _dirs(args: argparse.Namespace) -> list[Path]:
    overrides = {"log.dirs": args.data_dir} if args.data_dir else {}
    try:
        return BrokerConfig.build(overrides, Path(args.config) if args.config else None).log_dirs
    except ConfigError as exc:
        raise SystemExit(f"dm strays: invalid configuration: {exc}") from None


def _list(args: argparse.Namespace) -> None:
    found = strays.find(_dirs(args))
    if not found:
        print("no stray logs")
        return
    for stray in found:
        print(f"{stray.name}\t{stray.bytes} bytes\t{stray.path}")


def _delete(args: argparse.Namespace) -> None:
    dirs = _dirs(args)
    names = [s.name for s in strays.find(dirs)] if args.all else args.names
    if not names:
        raise SystemExit("dm strays delete: name the stray logs to delete (dm strays list), or --all")
    who = f"dm strays delete ({getpass.getuser()}@{socket.gethostname()})"
    for name in names:
        try:
            gone = strays.delete(dirs, name, who)
        except KeyError:
            raise SystemExit(f"dm strays delete: no stray log {name!r} in {', '.join(map(str, dirs))}") from None
        print(f"deleted {gone.name} ({gone.bytes} bytes)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("strays", help="list or delete logs a broker kept aside (stray)")
    actions = p.add_subparsers(dest="action", required=True)
    for name, func, help_text in (("list", _list, "the stray logs and their sizes"),
                                  ("delete", _delete, "delete stray logs (recorded in __dm_meta/stray-deletions.log)")):
        a = actions.add_parser(name, help=help_text)
        a.add_argument("--data-dir", help="the broker's log directory (log.dirs; default: ./data, or --config's)")
        a.add_argument("--config", help="the broker's .properties file (its log.dirs)")
        if name == "delete":
            a.add_argument("names", nargs="*", help="stray log names, as `dm strays list` prints them")
            a.add_argument("--all", action="store_true", help="every stray log of these directories")
        a.set_defaults(func=func)
