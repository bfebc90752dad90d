"""Share groups on the group coordinator (KIP-932): ShareGroupHeartbeat and member expiry (ADR 0038).

Membership is kept in memory on the coordinator: a share member holds no partition exclusively and
owns nothing to hand back, so a member that meets a new coordinator is told UNKNOWN_MEMBER_ID and
joins again (epoch 0) without losing anything. What must survive failover, the delivery state of the
records, lives with the share-partitions (share/).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ..share.group import ShareGroupState, ShareMember, assignment_for
from .consumer_group import metadata_hash
from .consumer_protocol import HeartbeatResult
from .group import Group, GroupState

if TYPE_CHECKING:
    from .coordinator import GroupCoordinator

log = logging.getLogger(__name__)
E = ErrorCode
LEAVE_EPOCH = -1


@dataclass(frozen=True)
class ShareSettings:
    enabled: bool = True
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200


def share_settings(config: Mapping[str, Any]) -> ShareSettings:
    return ShareSettings(enabled=config["group.share.enable"],
                         session_timeout_ms=config["group.share.session.timeout.ms"],
                         heartbeat_interval_ms=config["group.share.heartbeat.interval.ms"],
                         max_size=config["group.share.max.size"])


class ShareProtocol:
    def __init__(self, coordinator: GroupCoordinator, settings: ShareSettings) -> None:
        self.coordinator = coordinator
        self.settings = settings

    def _topics(self) -> dict[str, tuple[str, int]]:
        return self.coordinator.broker.topic_view.topics()

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, rack_id: str | None,
                  subscribed: tuple[str, ...] | None, client_id: str, client_host: str) -> HeartbeatResult:
        if not self.settings.enabled:
            return HeartbeatResult(E.unsupported_version, "Share groups are not enabled (group.share.enable).")
        if not group_id:
            return HeartbeatResult(E.invalid_group_id, "GroupId can't be empty.")
        if not member_id:
            return HeartbeatResult(E.invalid_request, "MemberId can't be empty.")
        if member_epoch < LEAVE_EPOCH:
            return HeartbeatResult(E.invalid_request, f"MemberEpoch {member_epoch} is invalid.")
        if member_epoch == 0 and not subscribed:
            return HeartbeatResult(E.invalid_request, "SubscribedTopicNames must be set in first request.")
        error = self.coordinator.error_for(group_id)
        if error is not None:
            return HeartbeatResult(error)
        group = self.coordinator.groups.get(group_id)
        if group is not None and group.share is None:
            if group.members or group.consumer is not None or group.offsets or group.state != GroupState.EMPTY:
                return HeartbeatResult(E.group_id_not_found, f"Group {group_id} is not a share group.")
            group.share = ShareGroupState()  # an empty, offset-less classic shell: the id is free
        if member_epoch == LEAVE_EPOCH:
            if group is None or group.share is None or member_id not in group.share.members:
                return HeartbeatResult(E.unknown_member_id, f"Member {member_id} is not in group {group_id}.")
            self.remove(group, member_id, "left the group")
            return HeartbeatResult(E.none, None, member_id, LEAVE_EPOCH, 0)
        if group is None:
            if member_epoch != 0:
                return HeartbeatResult(E.unknown_member_id, f"Member {member_id} is not in group {group_id}.")
            group = self.coordinator.groups[group_id] = Group(group_id, share=ShareGroupState())
        sg = group.share
        assert sg is not None
        member = sg.members.get(member_id)
        bumped = False
        if member is None:
            if member_epoch != 0:
                return HeartbeatResult(E.unknown_member_id, f"Member {member_id} is not in group {group_id}.")
            if len(sg.members) >= self.settings.max_size:
                return HeartbeatResult(E.group_max_size_reached, f"The share group has reached its maximum "
                                            f"size of {self.settings.max_size} members (group.share.max.size).")
            member = sg.members[member_id] = ShareMember(member_id)
            bumped = True
        elif member_epoch not in (0, member.member_epoch):
            return HeartbeatResult(E.fenced_member_epoch, f"The share group member has epoch {member_epoch}, "
                                        f"the coordinator expects {member.member_epoch}.")
        member.session_deadline = time.monotonic() + self._group_setting(
            group_id, "share.session.timeout.ms", self.settings.session_timeout_ms) / 1000
        member.client_id, member.client_host = client_id or member.client_id, client_host or member.client_host
        if rack_id is not None:
            member.rack_id = rack_id
        if subscribed is not None and tuple(subscribed) != member.subscribed_names:
            member.subscribed_names = tuple(subscribed)
            bumped = True
        topics = self._topics()
        names = {n for m in sg.members.values() for n in m.subscribed_names if n in topics}
        sg.subscribed = {n: topics[n] for n in names}
        sg.used |= set(names)
        digest = metadata_hash(sg.subscribed)
        if bumped or digest != sg.metadata_hash:
            sg.metadata_hash = digest
            sg.group_epoch += 1
            self._sync_state(group)
            self.coordinator.notify()
        assignment = assignment_for(member, topics)
        changed = assignment != member.assigned
        if changed or member.member_epoch != sg.group_epoch:
            member.assigned = assignment
            member.member_epoch = sg.group_epoch
        send = member_epoch == 0 or changed
        interval = self._group_setting(group_id, "share.heartbeat.interval.ms", self.settings.heartbeat_interval_ms)
        return HeartbeatResult(E.none, None, member_id, member.member_epoch, interval,
                                    member.assigned if send else None)

    def _group_setting(self, group_id: str, name: str, default: int) -> int:
        """A group config (IncrementalAlterConfigs on the group), else the broker's setting."""
        return self.coordinator.broker.group_config(group_id, name) if group_id else default

    def remove(self, group: Group, member_id: str, why: str) -> None:
        sg = group.share
        assert sg is not None
        sg.members.pop(member_id, None)
        sg.group_epoch += 1
        log.info("share group %s: member %s %s (epoch %d)", group.group_id, member_id, why, sg.group_epoch)
        self._sync_state(group)
        self.coordinator.notify()

    def expire(self, group: Group, now: float) -> None:
        if group.share is None:
            return
        for member in [m for m in group.share.members.values() if now > m.session_deadline]:
            self.remove(group, member.member_id, "session timed out")

    @staticmethod
    def _sync_state(group: Group) -> None:
        assert group.share is not None
        state = GroupState.STABLE if group.share.members else GroupState.EMPTY
        if group.state != state:
            group.transition(state)
