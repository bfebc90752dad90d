"""Membership of one share group (KIP-932), pure: members, their subscriptions and epochs, and the
assignment. In a share group a partition may go to several members at once (acquisition locks on the
partition leader keep each record with one member at a time), so dm gives every member every
partition of the topics it subscribes to: more consumers than partitions all get work.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..groups.assignors import Assignment


class ShareGroupPhase(enum.Enum):
    EMPTY = "Empty"
    STABLE = "Stable"


@dataclass
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_names: tuple[str, ...] = ()
    member_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)
    session_deadline: float = 0.0


@dataclass
class ShareGroupState:
    group_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    metadata_hash: int = 0
    subscribed: dict[str, tuple[str, int]] = field(default_factory=dict)  # name -> (topic id, partitions)
    # every topic the group subscribed to or had offsets set for, on this coordinator (for describing
    # and deleting its offsets)
    used: set[str] = field(default_factory=set)

    @property
    def phase(self) -> ShareGroupPhase:
        return ShareGroupPhase.STABLE if self.members else ShareGroupPhase.EMPTY


def assignment_for(member: ShareMember, topics: Mapping[str, tuple[str, int]]) -> Assignment:
    """Every partition of every existing topic the member subscribes to."""
    return {topics[name][0]: frozenset(range(topics[name][1])) for name in member.subscribed_names
            if name in topics and topics[name][1] > 0}
