"""`dm topics reassign`, `dm topics elect-leaders`, `dm cluster rebalance` and `dm cluster drain`:
moving partitions between brokers with Kafka's own APIs (KIP-455, KIP-460)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.table import Table

from ..controller.rebalance import Move, PlanError, plan, spread
from .client import console, fail
from .wire_admin import AdminError, ClusterView, Key, WireAdmin, run

POLL_S = 1.0


def load_plan(path: str) -> dict[Key, list[int]]:
    """A plan in Kafka's reassignment JSON: {"version": 1, "partitions": [{"topic", "partition", "replicas"}]}."""
    try:
        doc = json.loads(sys.stdin.read() if path == "-" else Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        fail(f"cannot read the plan {path}: {exc}")
    entries = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        fail(f"{path}: expected {{\"version\": 1, \"partitions\": [{{\"topic\": ..., \"partition\": ..., "
             "\"replicas\": [...]}}, ...]}")
    targets: dict[Key, list[int]] = {}
    for i, e in enumerate(entries):
        ok = (isinstance(e, dict) and isinstance(e.get("topic"), str) and isinstance(e.get("partition"), int)
              and isinstance(e.get("replicas"), list) and e["replicas"]
              and all(isinstance(r, int) for r in e["replicas"]))
        if not ok:
            fail(f"{path}: partitions[{i}] needs a topic (string), a partition (number) and replicas (numbers)")
        if len(set(e["replicas"])) != len(e["replicas"]):
            fail(f"{path}: {e['topic']}-{e['partition']} lists a broker twice: {e['replicas']}")
        if any(d not in (None, "any") for d in e.get("log_dirs", [])):
            fail(f"{path}: {e['topic']}-{e['partition']}: log_dirs other than \"any\" are not supported here; "
                 "move replicas between a broker's directories with AlterReplicaLogDirs")
        targets[(e["topic"], e["partition"])] = list(e["replicas"])
    return targets


def moves_table(title: str, moves: list[Move], view: ClusterView) -> Table:
    table = Table(title=title)
    for col in ("topic", "partition", "replicas", "new replicas", "leader", "new preferred leader", "copies"):
        table.add_column(col)
    for m in moves:
        key = (m.topic, m.partition)
        table.add_row(m.topic, str(m.partition), _ids(m.before), _ids(m.after), str(view.leaders.get(key, -1)),
                      str(m.after[0]), str(m.copies))
    return table


def _ids(replicas: Any) -> str:
    return ",".join(map(str, replicas))


def spread_table(title: str, assignment: dict[Key, list[int]], brokers: list[int]) -> Table:
    table = Table(title=title)
    for col in ("broker", "replicas", "preferred leaderships"):
        table.add_column(col)
    for broker, (replicas, leaders) in spread(assignment, brokers).items():
        table.add_row(str(broker), str(replicas), str(leaders))
    return table


async def follow(admin: WireAdmin, keys: set[Key], out: Any) -> None:
    """Prints progress until none of `keys` is being reassigned any more."""
    last = ""
    started = time.monotonic()
    while True:
        ongoing = {k: v for k, v in (await admin.list_reassignments()).items() if k in keys}
        if not ongoing:
            out.print(f"all {len(keys)} partitions reassigned in {time.monotonic() - started:.1f}s")
            return
        moving = sorted(ongoing.items())[:8]
        line = f"{len(keys) - len(ongoing)}/{len(keys)} partitions done; moving: " + ", ".join(
            f"{t}-{p} (+{_ids(o.adding) or '-'} -{_ids(o.removing) or '-'})" for (t, p), o in moving)
        if len(ongoing) > 8:
            line += f", ... {len(ongoing) - 8} more"
        if line != last:
            out.print(line)
            last = line
        await asyncio.sleep(POLL_S)


async def apply(admin: WireAdmin, targets: dict[Key, list[int] | None], throttle: int | None, wait: bool,
                out: Any) -> bool:
    """Starts the reassignments; with `wait`, follows them, then elects the preferred leaders and
    removes the throttle it set. Returns whether every partition was accepted."""
    if throttle is not None:
        await admin.set_throttle(throttle)
        out.print(f"replication throttled to {throttle} bytes/s per broker for the move")
    results = await admin.alter_reassignments(targets)
    refused = {k: e for k, e in results.items() if e}
    for (topic, partition), error in sorted(refused.items()):
        out.print(f"[red]{topic}-{partition}: refused: {error}[/red]")
    accepted = {k for k in targets if k not in refused}
    out.print(f"{len(accepted)} partition reassignments started")
    if not wait:
        out.print("not waiting: `dm topics reassign --status` shows progress, `--cancel` stops it")
        return not refused
    try:
        await follow(admin, accepted, out)
    except asyncio.CancelledError:
        out.print("stopped watching: the reassignment goes on (`dm topics reassign --status`, `--cancel`)")
        raise
    cancelled = [k for k, v in targets.items() if v is None]
    elected = await admin.elect_leaders(False, sorted(accepted - set(cancelled))) if accepted else {}
    moved = [k for k, e in elected.items() if e is None]
    if moved:
        out.print(f"preferred leaders elected for {len(moved)} partitions")
    if throttle is not None:
        await admin.set_throttle(None)
        out.print("replication throttle removed")
    return not refused


def _run(args: argparse.Namespace, work: Any) -> Any:
    try:
        return run(args.bootstrap, work)
    except AdminError as exc:
        fail(str(exc))
    except (OSError, TimeoutError) as exc:
        fail(f"lost the connection to the cluster: {exc or type(exc).__name__}")


# -- dm topics reassign / elect-leaders ---------------------------------------------------------

def reassign(args: argparse.Namespace) -> None:
    out = console()
    if args.status:
        _run(args, lambda admin: _status(admin, out))
        return
    if args.cancel:
        async def cancel(admin: WireAdmin) -> None:
            ongoing = await admin.list_reassignments()
            keys = set(load_plan(args.plan)) & set(ongoing) if args.plan else set(ongoing)
            if not keys:
                out.print("no reassignment in progress" + (" for the partitions of the plan" if args.plan else ""))
                return
            await apply(admin, dict.fromkeys(keys), None, not args.no_wait, out)
            out.print(f"cancelled {len(keys)} reassignments (the partitions keep their original replicas)")
        _run(args, cancel)
        return
    if not args.plan:
        fail("give a plan file (Kafka's reassignment JSON), or --status, or --cancel")
    targets = load_plan(args.plan)

    async def start(admin: WireAdmin) -> bool:
        view = await admin.cluster()
        moves = [Move(t, p, tuple(view.replicas.get((t, p), ())), tuple(r)) for (t, p), r in sorted(targets.items())]
        out.print(moves_table("reassignment", moves, view))
        return await apply(admin, dict(targets), args.throttle, not args.no_wait, out)

    if not _run(args, start):
        raise SystemExit(1)


async def _status(admin: WireAdmin, out: Any) -> None:
    ongoing = await admin.list_reassignments()
    if not ongoing:
        out.print("no reassignment in progress")
        return
    view = await admin.cluster()
    table = Table(title=f"{len(ongoing)} reassignments in progress")
    for col in ("topic", "partition", "replicas", "adding", "removing", "in sync"):
        table.add_column(col)
    for (topic, partition), o in sorted(ongoing.items()):
        table.add_row(topic, str(partition), _ids(o.replicas), _ids(o.adding), _ids(o.removing),
                      _ids(view.isr.get((topic, partition), [])))
    out.print(table)


def elect_leaders(args: argparse.Namespace) -> None:
    out = console()
    requested = [_partition_or_topic(i) for i in args.partition]

    async def elect(admin: WireAdmin) -> dict[Key, str | None]:
        if not requested:
            return await admin.elect_leaders(args.unclean, None)
        topics = {w for w in requested if isinstance(w, str)}
        known = (await admin.cluster()).replicas if topics else {}
        keys: list[Key] = [w for w in requested if not isinstance(w, str)]
        for topic in sorted(topics):
            found = [k for k in known if k[0] == topic]
            if not found:
                fail(f"topic {topic} does not exist")
            keys += found
        return await admin.elect_leaders(args.unclean, keys)

    results = _run(args, elect)
    failed = 0
    for (topic, partition), error in sorted(results.items()):
        if error is None:
            out.print(f"{topic}-{partition}: new leader elected")
        elif error.startswith("election_not_needed"):
            out.print(f"{topic}-{partition}: already led by its preferred replica" if not args.unclean
                      else f"{topic}-{partition}: has a live leader")
        else:
            failed += 1
            out.print(f"[red]{topic}-{partition}: {error}[/red]")
    if failed:
        raise SystemExit(1)


def _partition_or_topic(text: str) -> Key | str:
    topic, sep, partition = text.rpartition(":")
    if sep and partition.isdigit():
        return topic, int(partition)
    return text


# -- dm cluster rebalance / drain ----------------------------------------------------------------

def rebalance(args: argparse.Namespace) -> None:
    _balance(args, exclude=set(), title="rebalance")


def drain(args: argparse.Namespace) -> None:
    _balance(args, exclude={args.broker}, title=f"drain broker {args.broker}")


def _balance(args: argparse.Namespace, exclude: set[int], title: str) -> None:
    out = console()

    async def work(admin: WireAdmin) -> bool:
        ongoing = await admin.list_reassignments()
        if ongoing:
            fail(f"{len(ongoing)} partition reassignments are in progress; wait for them "
                 "(`dm topics reassign --status`) or cancel them (`dm topics reassign --cancel`) first")
        view = await admin.cluster()
        known = view.known()
        missing = exclude - known
        if missing:
            fail(f"broker {', '.join(map(str, sorted(missing)))} is not in the cluster "
                 f"(brokers: {', '.join(map(str, sorted(known)))})")
        down = known - view.serving - exclude
        if down:
            # The planner moves every replica off a broker it is not given: a broker that is only
            # restarting would be emptied, and one that comes back would be planned around.
            ids = ", ".join(map(str, sorted(down)))
            fail(f"broker {ids} is not serving (stopped or fenced): {title} waits until it is back; "
                 f"to move its replicas elsewhere for good, drain it (`dm cluster drain {min(down)}`)")
        try:
            moves = plan(view.replicas, {b: view.brokers.get(b) for b in view.serving | exclude}, exclude)
        except PlanError as exc:
            fail(f"cannot {title}: {exc}")
        live = sorted(view.serving - exclude)
        after = dict(view.replicas)
        after.update({(m.topic, m.partition): list(m.after) for m in moves})
        if not moves:
            out.print(spread_table("replicas and leaders per broker", after, live))
            out.print(f"nothing to move: {title} would not change the cluster")
            return True
        out.print(moves_table(f"{title}: {len(moves)} partitions, {sum(m.copies for m in moves)} replica copies",
                              moves, view))
        out.print(spread_table("replicas and leaders per broker afterwards", after, live))
        if args.dry_run:
            out.print("dry run: nothing was changed")
            return True
        ok = await apply(admin, {(m.topic, m.partition): list(m.after) for m in moves}, args.throttle,
                         not args.no_wait, out)
        if ok and exclude and not args.no_wait:
            out.print(f"broker {', '.join(map(str, sorted(exclude)))} holds no replicas now and can be removed")
        return ok

    if not _run(args, work):
        raise SystemExit(1)


def _add_apply_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--throttle", type=int, metavar="BYTES_PER_S",
                   help="cap the replication of moving replicas while this runs (both throttled rates, every "
                        "broker; removed when done)")
    p.add_argument("--no-wait", action="store_true", help="start the moves and return without following them")


def register_topic_commands(tsub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = tsub.add_parser("reassign", parents=[common],
                        help="move partitions between brokers with a plan in Kafka's reassignment JSON")
    p.add_argument("plan", nargs="?", help="the plan file ('-': standard input)")
    p.add_argument("--status", action="store_true", help="show the reassignments in progress")
    p.add_argument("--cancel", action="store_true",
                   help="cancel the reassignments in progress (those of PLAN, if given): back to the old replicas")
    _add_apply_options(p)
    p.set_defaults(func=reassign)
    p = tsub.add_parser("elect-leaders", parents=[common],
                        help="elect preferred leaders (or, --unclean, any live replica of a leaderless partition)")
    p.add_argument("partition", nargs="*", metavar="TOPIC[:PARTITION]", help="what to elect (default: everything)")
    p.add_argument("--unclean", action="store_true",
                   help="elect an out-of-sync replica where no in-sync one is live (may lose records)")
    p.set_defaults(func=elect_leaders)


def register_cluster(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    cluster = sub.add_parser("cluster", help="balance the cluster's partitions over its brokers")
    csub = cluster.add_subparsers(dest="action", required=True)
    p = csub.add_parser("rebalance", parents=[common],
                        help="spread replicas and leaders evenly over the brokers and racks, with the fewest moves")
    p.add_argument("--dry-run", action="store_true", help="print the moves and change nothing")
    _add_apply_options(p)
    p.set_defaults(func=rebalance)
    p = csub.add_parser("drain", parents=[common], help="move every replica off one broker (before removing it)")
    p.add_argument("broker", type=int, help="the broker's id")
    p.add_argument("--dry-run", action="store_true", help="print the moves and change nothing")
    _add_apply_options(p)
    p.set_defaults(func=drain)
