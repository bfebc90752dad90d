"""Whether a member id belongs to a share group: asked when a member opens a share session on a partition's
leader, which may not be the group's coordinator (issue 65: a member id that never joined acquired records,
and one member's session could be closed by another principal naming its id).

The coordinator is asked with the Kafka API any admin uses, ShareGroupDescribe, over the brokers' own
connections; the group's coordinator is the leader of its __consumer_offsets partition."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from ..protocol.build import make
from ..protocol.codec import request_class

log = logging.getLogger(__name__)
DESCRIBE_KEY, DESCRIBE_VERSION = 77, 1
ASK_TIMEOUT_S = 10


class Channels(Protocol):
    async def request(self, node_id: int, body: Any, timeout: float) -> Any: ...


class Coordinator(Protocol):
    def partition_for(self, group_id: str) -> int: ...

    def describe(self, group_id: str) -> tuple[int, Any]: ...


def member_error(group: Any, member: str) -> ErrorCode:
    """NONE when `member` is a current member of the (share) group, else UNKNOWN_MEMBER_ID."""
    share = getattr(group, "share", None)
    return ErrorCode.none if share is not None and member in share.members else ErrorCode.unknown_member_id


class ShareMembership:
    def __init__(self, node_id: int, coordinator: Coordinator, coordinator_node: Any, channels: Channels) -> None:
        self.node_id = node_id
        self.coordinator = coordinator
        self.coordinator_node = coordinator_node  # group id -> the node leading its offsets partition, or -1
        self.channels = channels

    async def check(self, group_id: str, member: str) -> ErrorCode:
        """NONE, UNKNOWN_MEMBER_ID, or the coordinator's error (retriable: not there, loading)."""
        node = self.coordinator_node(group_id)
        if node < 0:
            return ErrorCode.coordinator_not_available
        if node == self.node_id:
            code, group = self.coordinator.describe(group_id)
            return ErrorCode(code) if code else member_error(group, member)
        body = make(request_class(DESCRIBE_KEY, DESCRIBE_VERSION), group_ids=(group_id,),
                    include_authorized_operations=False)
        try:
            answer = await self.channels.request(node, body, ASK_TIMEOUT_S)
        except (ConnectionError, TimeoutError) as exc:
            log.debug("asking broker %d about share group %s: %s", node, group_id, exc)
            return ErrorCode.coordinator_not_available
        described = answer.groups[0]
        if described.error_code == ErrorCode.group_id_not_found:
            return ErrorCode.unknown_member_id
        if described.error_code != ErrorCode.none:
            return described.error_code
        return ErrorCode.none if any(m.member_id == member for m in described.members) else \
            ErrorCode.unknown_member_id
