"""Rebalance planning, pure: where replicas and preferred leaders should be so that every live
broker holds the same number of each (within one), with as few replica moves as possible.

Used by `dm cluster rebalance` and `dm cluster drain` and by the operator when brokers are added
or removed. The plan is a list of reassignments in Kafka's terms; applying it is someone else's job.

Greedy, topic by topic, in three passes, each of which only moves a replica from a fuller broker
to an emptier one (so no replica moves twice):
1. replicas on brokers being drained (or gone) go to the least loaded broker, keeping racks apart;
2. while two brokers differ by more than one of the topic's replicas, one moves from the fuller to
   the emptier (then, with the topic even, while two differ by two overall), never putting two
   replicas of a partition on one rack that were on two;
3. preferred leaders (the first replica) are balanced by reordering replicas, which moves no data.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

Key = tuple[str, int]


class PlanError(Exception):
    """The brokers left cannot hold the partitions (a replication factor above their number)."""


@dataclass(frozen=True)
class Move:
    topic: str
    partition: int
    before: tuple[int, ...]
    after: tuple[int, ...]

    @property
    def copies(self) -> int:
        """Replicas whose data must be copied to a new broker."""
        return len(set(self.after) - set(self.before))


class Racks:
    def __init__(self, racks: Mapping[int, str | None]) -> None:
        self.racks = racks

    def of(self, broker: int) -> str:
        # Without a rack every broker is its own failure domain.
        return self.racks.get(broker) or f"broker-{broker}"

    def spread(self, replicas: Sequence[int]) -> int:
        return len({self.of(b) for b in replicas})

    def new_replica(self, candidates: Sequence[int], others: Sequence[int], load: Mapping[int, int],
                    total: Mapping[int, int] | None = None) -> int:
        """Where a partition's next replica goes: a rack its `others` do not use, then the broker
        holding fewest (of the topic, then overall), then the lowest id."""
        used = {self.of(r) for r in others}
        return min(candidates, key=lambda b: (self.of(b) in used, load[b], (total or {}).get(b, 0), b))


def plan(assignment: Mapping[Key, Sequence[int]], brokers: Mapping[int, str | None],
         exclude: Collection[int] = ()) -> list[Move]:
    """The moves that balance `assignment` over `brokers` (id -> rack) minus `exclude`: each topic
    spread evenly on its own (a topic's traffic follows its partitions), ties going to the
    brokers holding least overall, so the totals come out even too."""
    targets = sorted(b for b in brokers if b not in exclude)
    if not targets:
        raise PlanError("no broker is left to hold the partitions")
    racks = Racks(brokers)
    new = {key: list(replicas) for key, replicas in sorted(assignment.items())}
    total = Counter({b: 0 for b in targets})
    total_leaders = Counter({b: 0 for b in targets})
    for topic in sorted({key[0] for key in new}):
        group = {key: replicas for key, replicas in new.items() if key[0] == topic}
        load = Counter({b: 0 for b in targets})
        for replicas in group.values():
            load.update(r for r in replicas if r in load)
        _evacuate(group, targets, load, total, racks)
        _balance_replicas(group, targets, load, total, racks)
        _balance_leaders(group, targets, total_leaders)
        for replicas in group.values():
            total.update(replicas)
            total_leaders[replicas[0]] += 1
    return [Move(key[0], key[1], tuple(assignment[key]), tuple(replicas))
            for key, replicas in new.items() if list(assignment[key]) != replicas]


def _evacuate(new: dict[Key, list[int]], targets: list[int], load: Counter[int], total: Counter[int],
              racks: Racks) -> None:
    for key, replicas in new.items():
        for i, replica in enumerate(replicas):
            if replica in load:
                continue
            others = [r for r in replicas if r != replica]
            candidates = [b for b in targets if b not in replicas]
            if not candidates:
                raise PlanError(f"{key[0]}-{key[1]} has {len(replicas)} replicas but only {len(targets)} "
                                "brokers would be left")
            best = racks.new_replica(candidates, others, load, total)
            replicas[i] = best
            load[best] += 1


def _balance_replicas(new: dict[Key, list[int]], targets: list[int], load: Counter[int], total: Counter[int],
                      racks: Racks) -> None:
    while True:
        move = _best_replica_move(new, targets, load, total, racks)
        if move is None:
            return
        key, source, target = move
        replicas = new[key]
        replicas[replicas.index(source)] = target
        load[source] -= 1
        load[target] += 1


def _best_replica_move(new: dict[Key, list[int]], targets: list[int], load: Counter[int], total: Counter[int],
                       racks: Racks) -> tuple[Key, int, int] | None:
    """The next move: from a broker with two more of this topic's replicas than another; once the
    topic is even, from one holding one more of them and two more overall (the topic stays even,
    the totals get even)."""
    def overall(b: int) -> int:
        return total[b] + load[b]

    by_load_desc = sorted(targets, key=lambda b: (-load[b], -overall(b), b))
    by_load_asc = sorted(targets, key=lambda b: (load[b], overall(b), b))
    pairs = [(s, t) for s in by_load_desc for t in by_load_asc if load[s] - load[t] >= 2]
    pairs += sorted(((s, t) for s in targets for t in targets
                     if load[s] - load[t] == 1 and overall(s) - overall(t) >= 2),
                    key=lambda st: (overall(st[1]) - overall(st[0]), st))
    for source, target in pairs:
        best: tuple[tuple[int, int, str, int], Key] | None = None
        for key, replicas in new.items():
            if source not in replicas or target in replicas:
                continue
            after = [target if r == source else r for r in replicas]
            if racks.spread(after) < racks.spread(replicas):
                continue
            # Prefer a follower (the preferred leader stays) and a partition whose racks improve.
            rank = (replicas[0] == source, racks.spread(replicas) - racks.spread(after), key[0], key[1])
            if best is None or rank < best[0]:
                best = (rank, key)
        if best is not None:
            return best[1], source, target
    return None


def _balance_leaders(new: dict[Key, list[int]], targets: list[int], total: Counter[int]) -> None:
    """Moves preferred leadership along a chain of partitions (a leads p1 where b follows, b leads
    p2 where c follows, ...) from a broker leading most to one leading at least two fewer: every
    broker in between gives one leadership and takes one, so only the ends change."""
    leaders = Counter({b: 0 for b in targets})
    leaders.update(replicas[0] for replicas in new.values())
    while True:
        for source in sorted(targets, key=lambda b: (-leaders[b], -total[b], b)):
            path = _leadership_path(new, source, leaders, total)
            if path is not None:
                break
        else:
            return
        for key, target in path:
            replicas = new[key]
            i = replicas.index(target)
            replicas[0], replicas[i] = target, replicas[0]
        leaders[source] -= 1
        leaders[path[-1][1]] += 1


def _leadership_path(new: dict[Key, list[int]], source: int, leaders: Counter[int],
                     total: Counter[int]) -> list[tuple[Key, int]] | None:
    """Breadth-first: the shortest chain of (partition, its new leader) from `source` to a broker
    leading at least two fewer partitions than `source`."""
    led: dict[int, list[Key]] = {}
    for key, replicas in new.items():
        led.setdefault(replicas[0], []).append(key)
    came_from: dict[int, tuple[int, Key] | None] = {source: None}
    frontier = [source]
    while frontier:
        following = []
        for broker in frontier:
            for key in led.get(broker, []):
                for follower in sorted(new[key][1:], key=lambda b: (total[b], b)):
                    if follower in came_from or follower not in leaders:
                        continue
                    came_from[follower] = (broker, key)
                    gap = leaders[source] - leaders[follower]
                    if gap >= 2 or (gap == 1 and total[source] + leaders[source] - total[follower]
                                    - leaders[follower] >= 2):
                        path = []
                        node = follower
                        while (step := came_from[node]) is not None:
                            path.append((step[1], node))
                            node = step[0]
                        return path[::-1]
                    following.append(follower)
        frontier = following
    return None


def spread(assignment: Mapping[Key, Sequence[int]], brokers: Collection[int]) -> dict[int, tuple[int, int]]:
    """broker -> (replicas, preferred leaderships): what a balanced cluster keeps within one."""
    replicas = Counter({b: 0 for b in brokers})
    leaders = Counter({b: 0 for b in brokers})
    for r in assignment.values():
        replicas.update(r)
        if r:
            leaders[r[0]] += 1
    return {b: (replicas[b], leaders[b]) for b in sorted(set(brokers) | set(replicas))}
