"""In-memory state of one group: a classic one, or the shell (offsets) of a KIP-848 consumer group."""

from __future__ import annotations

import asyncio
import enum
import time
from collections import Counter
from dataclasses import dataclass, field

from ..share.group import ShareGroupState
from .consumer_group import ConsumerGroupState
from .records import GroupValue, MemberValue, OffsetValue


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class JoinResult:
    error: int
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)  # only for the leader
    skip_assignment: bool = False


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[tuple[int, bytes]] | None = None
    heartbeat_deadline: float = 0.0

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None and not self.join_future.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_future is not None and not self.sync_future.done()

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def to_value(self, protocol: str | None) -> MemberValue:
        return MemberValue(self.member_id, self.group_instance_id, self.client_id, self.client_host,
                           self.rebalance_timeout_ms, self.session_timeout_ms,
                           self.metadata_for(protocol) if protocol else b"", self.assignment)


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: set[str] = field(default_factory=set)  # ids handed out with MEMBER_ID_REQUIRED
    offsets: dict[tuple[str, int], OffsetValue] = field(default_factory=dict)
    # commits written but not yet confirmed by the ISR; offset expiry leaves these partitions alone
    pending_commits: Counter[tuple[str, int]] = field(default_factory=Counter)
    # Offsets committed in a transaction (TxnOffsetCommit), by producer id: applied when its COMMIT
    # marker is written here, dropped at ABORT; until then OffsetFetch with require_stable waits.
    pending_txn: dict[int, dict[tuple[str, int], OffsetValue]] = field(default_factory=dict)
    state_timestamp: int = field(default_factory=lambda: int(time.time() * 1000))
    rebalance_deadline: asyncio.TimerHandle | None = None
    initial_delay_until: float | None = None
    new_member_added: bool = False
    # Set for a KIP-848 consumer group (ADR 0037): its members, epochs and assignments live there;
    # `state` then only says Empty or Stable, for the code both kinds share (offsets, expiry).
    consumer: ConsumerGroupState | None = None
    # Set for a share group (KIP-932, ADR 0038): its members; it has no offsets here.
    share: ShareGroupState | None = None

    @property
    def group_type(self) -> str:
        if self.share is not None:
            return "share"
        return "classic" if self.consumer is None else "consumer"

    @property
    def state_name(self) -> str:
        """The state Kafka's ListGroups and Describe* report for the group's type."""
        if self.consumer is not None and self.state != GroupState.DEAD:
            return self.consumer.phase.value
        if self.share is not None and self.state != GroupState.DEAD:
            return self.share.phase.value
        return self.state.value

    def transition(self, state: GroupState) -> None:
        self.state = state
        self.state_timestamp = int(time.time() * 1000)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.new_member_added = True

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """A joining member must share the protocol type and at least one protocol."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        names = {name for name, _ in protocols}
        return all(names & {n for n, _ in m.protocols} for m in self.members.values()) and bool(
            names & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str | None:
        """The protocol with the most votes among those every member supports (Kafka's rule:
        each member votes for its most preferred candidate)."""
        candidates = self.candidate_protocols()
        if not candidates:
            return None
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next(name for name, _ in m.protocols if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(sorted(votes), key=lambda name: votes[name])

    def all_rejoined(self) -> bool:
        return all(m.awaiting_join for m in self.members.values())

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (None when the protocol is not the consumer one)."""
        from .records import subscribed_topics

        if self.consumer is not None:
            return set(self.consumer.subscribed)
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            topics |= subscribed_topics(m.metadata_for(self.protocol_name))
        return topics

    def to_value(self) -> GroupValue:
        return GroupValue(self.protocol_type or "", self.generation, self.protocol_name, self.leader_id,
                          self.state_timestamp, [m.to_value(self.protocol_name) for m in self.members.values()])
