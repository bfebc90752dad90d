"""State of one KIP-848 consumer group and its members, and the reconciliation that moves a member
from what it owns to its target assignment (pure; the coordinator does the I/O).

Epochs: the group epoch rises whenever membership, a subscription or the subscribed topics change;
the target assignment is recomputed for it (assignment epoch = group epoch). A member keeps its epoch
while it still owns partitions the target takes away (UNREVOKED_PARTITIONS); once it confirms the
revocation in a heartbeat it moves to the target epoch and receives the partitions no other member
still owns (the rest later: UNRELEASED_PARTITIONS).

Assignment epochs (KIP-1251): each partition a member owns remembers the member epoch at which it was
assigned to it. An offset commit that carries an older member epoch than the member's current one is
still the member's own, for the partitions it has owned without a break since that epoch: a commit
in flight while a heartbeat raised the epoch is accepted instead of failing with STALE_MEMBER_EPOCH.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from .assignors import Assignment

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class MemberState(enum.IntEnum):
    """Kafka's MemberState values, as stored in ConsumerGroupCurrentMemberAssignmentValue."""

    STABLE = 1
    UNREVOKED_PARTITIONS = 2
    UNRELEASED_PARTITIONS = 3


class ConsumerGroupPhase(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


def merged(*assignments: Mapping[str, frozenset[int]]) -> Assignment:
    out: dict[str, set[int]] = {}
    for a in assignments:
        for topic, parts in a.items():
            out.setdefault(topic, set()).update(parts)
    return {t: frozenset(ps) for t, ps in out.items() if ps}


def minus(a: Mapping[str, frozenset[int]], b: Mapping[str, frozenset[int]]) -> Assignment:
    out = {t: frozenset(ps - b.get(t, frozenset())) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


def intersect(a: Mapping[str, frozenset[int]], b: Mapping[str, frozenset[int]]) -> Assignment:
    out = {t: frozenset(ps & b.get(t, frozenset())) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


def normalised(a: Mapping[str, Iterable[int]]) -> Assignment:
    return {t: frozenset(ps) for t, ps in a.items() if ps}


def is_subset(a: Mapping[str, frozenset[int]], b: Mapping[str, frozenset[int]]) -> bool:
    return not minus(a, b)


@dataclass(frozen=True)
class ClassicInfo:
    """A member that speaks the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside a KIP-848 group."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_names: tuple[str, ...] = ()
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = 300_000
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    classic: ClassicInfo | None = None
    # (topic id, partition) -> the member epoch at which this member was given it, for every partition
    # it owns (assigned or pending revocation); missing entries count as the member's current epoch
    assignment_epochs: dict[tuple[str, int], int] = field(default_factory=dict)
    # Not persisted: deadlines on this coordinator's clock, and what the member was last told.
    session_deadline: float = 0.0
    revocation_deadline: float | None = None

    def owned(self) -> Assignment:
        return merged(self.assigned, self.pending_revocation)

    def assignment_epoch(self, topic_id: str, partition: int) -> int | None:
        """The epoch since which the member has owned the partition, None when it does not own it."""
        if partition not in self.assigned.get(topic_id, ()) and partition not in self.pending_revocation.get(
                topic_id, ()):
            return None
        return self.assignment_epochs.get((topic_id, partition), max(self.member_epoch, 0))

    def owned_since(self, epoch: int, partitions: Iterable[tuple[str, int]]) -> bool:
        """True when every partition was the member's at `epoch` and has stayed so (KIP-1251's test for a
        commit with an older epoch than the member's: assignment epoch <= epoch <= member epoch)."""
        if epoch > self.member_epoch:
            return False
        for topic_id, partition in partitions:
            since = self.assignment_epoch(topic_id, partition)
            if since is None or since > epoch:
                return False
        return True

    def keep_assignment_epochs(self, new_epoch: int) -> None:
        """Gives partitions the member did not own before `new_epoch`, the epoch it now moves to, and forgets
        those it gave up; called after every change of what it owns."""
        owned = {(t, p) for t, ps in self.owned().items() for p in ps}
        self.assignment_epochs = {tp: self.assignment_epochs.get(tp, new_epoch) for tp in owned}

    def cap_assignment_epochs(self) -> None:
        """A static member restarted at its previous epoch: no partition may claim a later epoch than it."""
        ceiling = max(self.member_epoch, 0)
        self.assignment_epochs = {tp: min(e, ceiling) for tp, e in self.assignment_epochs.items()}


@dataclass
class ConsumerGroupState:
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    metadata_hash: int = 0
    # topic name -> (topic id, partition count) of the subscribed topics at the last assignment
    subscribed: dict[str, tuple[str, int]] = field(default_factory=dict)

    @property
    def phase(self) -> ConsumerGroupPhase:
        if not self.members:
            return ConsumerGroupPhase.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupPhase.ASSIGNING
        if any(m.member_epoch != self.assignment_epoch or m.state != MemberState.STABLE
               for m in self.members.values()):
            return ConsumerGroupPhase.RECONCILING
        return ConsumerGroupPhase.STABLE

    def add(self, member: ConsumerMember) -> None:
        self.members[member.member_id] = member
        if member.instance_id:
            self.static_members[member.instance_id] = member.member_id

    def remove(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.instance_id and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        self.target.pop(member_id, None)
        return member

    def owners(self, excluding: str) -> dict[tuple[str, int], str]:
        """Who owns each partition (assigned or still revoking), other members than `excluding`."""
        out: dict[tuple[str, int], str] = {}
        for member in self.members.values():
            if member.member_id == excluding:
                continue
            for topic, parts in member.owned().items():
                for p in parts:
                    out[(topic, p)] = member.member_id
        return out

    def preferred_assignor(self, configured: list[str]) -> str:
        """The assignor most members ask for (ties: the configured order); the first configured one
        when none asks."""
        votes: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        if not votes:
            return configured[0]
        return max(configured, key=lambda name: (votes.get(name, 0), -configured.index(name)))


def subscribed_topics(member: ConsumerMember, topics: Mapping[str, tuple[str, int]],
                      matching: Callable[[str], frozenset[str]]) -> set[str]:
    """Names of existing topics the member subscribes to, by name or by its regex (`matching` gives
    the topics a regex matches; internal topics, `__*`, are subscribed only by name)."""
    names = {n for n in member.subscribed_names if n in topics}
    if member.subscribed_regex:
        names |= matching(member.subscribed_regex)
    return names


def metadata_hash(subscribed: Mapping[str, tuple[str, int]]) -> int:
    """A stable 64-bit summary of the subscribed topics (name, id, partition count)."""
    digest = hashlib.blake2b(digest_size=8)
    for name in sorted(subscribed):
        topic_id, count = subscribed[name]
        digest.update(f"{name}\0{topic_id}\0{count}\n".encode())
    return int.from_bytes(digest.digest(), "big", signed=True)


def reconcile(member: ConsumerMember, target_epoch: int, target: Assignment,
              owned_by_others: Mapping[tuple[str, int], str], reported: Assignment | None) -> None:
    """Moves the member one step towards its target (Kafka's CurrentAssignmentBuilder).

    `reported`: the partitions the member said it owns in this heartbeat (None when it did not say).
    """
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        if reported is None or intersect(reported, member.pending_revocation):
            return  # still revoking: the epoch stays until the member confirms
        member.pending_revocation = {}
        member.revocation_deadline = None
        _next(member, target_epoch, target, owned_by_others)
        return
    if member.member_epoch == target_epoch and member.state == MemberState.STABLE:
        return
    _next(member, target_epoch, target, owned_by_others)


def _next(member: ConsumerMember, target_epoch: int, target: Assignment,
          owned_by_others: Mapping[tuple[str, int], str]) -> None:
    retained = intersect(member.assigned, target)
    revoke = minus(member.assigned, target)
    if revoke:
        member.assigned = retained
        member.pending_revocation = revoke
        member.state = MemberState.UNREVOKED_PARTITIONS
        member.keep_assignment_epochs(member.member_epoch)
        return
    wanted = minus(target, retained)
    free = {t: frozenset(p for p in ps if (t, p) not in owned_by_others) for t, ps in wanted.items()}
    member.assigned = merged(retained, free)
    member.pending_revocation = {}
    unreleased = minus(wanted, free)
    member.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    if member.member_epoch != target_epoch:
        member.previous_member_epoch = member.member_epoch
        member.member_epoch = target_epoch
    member.keep_assignment_epochs(member.member_epoch)
