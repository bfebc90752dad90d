"""The share-partitions a broker leads and the share sessions of the members that fetch from it
(KIP-932, ADR 0038): the state of each (group, topic, partition) this broker leads, created from the
persisted state (or the group's `share.auto.offset.reset`) when the partition is first fetched under a
leader epoch, and written back before acknowledgements are answered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from .partition_state import SharePartitionState
from .state_store import Snapshot

if TYPE_CHECKING:
    from ..replication.partition import Partition

log = logging.getLogger(__name__)

FINAL_EPOCH = -1
INITIAL_EPOCH = 0
Key = tuple[str, str, int]  # group, topic, partition


@dataclass(frozen=True)
class ShareFetchSettings:
    lock_ms: int = 30_000
    delivery_limit: int = 5
    max_locks: int = 2000
    max_sessions: int = 2000
    # a group's share of the session table: as many sessions as it may have members (group.share.max.size), so
    # one principal with READ on one group cannot take the table from the others (issue 65)
    max_sessions_per_group: int = 200


def share_fetch_settings(config: Mapping[str, Any]) -> ShareFetchSettings:
    return ShareFetchSettings(lock_ms=config["group.share.record.lock.duration.ms"],
                              delivery_limit=config["group.share.delivery.count.limit"],
                              max_locks=config["group.share.partition.max.record.locks"],
                              max_sessions_per_group=config["group.share.max.size"])


class SnapshotStore(Protocol):
    """Where share-partition state survives the leader (share/state_store.py)."""

    async def read(self, group: str, topic_id: str, partition: int) -> Snapshot | None: ...

    async def write(self, group: str, topic_id: str, partition: int, snapshot: Snapshot) -> ErrorCode: ...


class ShareSessionError(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error


@dataclass
class ShareSession:
    epoch: int = 0  # the epoch of the request being answered; the next one carries epoch + 1
    partitions: set[tuple[str, int]] = field(default_factory=set)
    last_used: float = field(default_factory=time.monotonic)
    # Who opened it, and on which connection: only that connection uses or closes it (as Kafka 4.1 binds a
    # share session to its connection), and it ends with that connection.
    owner: str = ""
    connection: object | None = None


@dataclass
class _Held:
    state: SharePartitionState
    leader_epoch: int
    topic_id: str
    state_epoch: int = 0  # the stored state's epoch (raised when the group's offsets are altered or deleted)
    stored: bool = False  # whether a snapshot of this state exists in the store


class SharePartitions:
    def __init__(self, settings: ShareFetchSettings, store: SnapshotStore | None,
                 group_config: Callable[[str, str], Any] | None = None) -> None:
        self.settings = settings
        self.store = store
        # (group, name) -> the group config in effect: share.auto.offset.reset, share.record.lock.duration.ms
        self.group_config = group_config
        self.held: dict[Key, _Held] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self._loading: dict[Key, asyncio.Lock] = {}

    # -- sessions ------------------------------------------------------------------------------

    def session_for(self, group: str, member: str, epoch: int, opening_allowed: bool = True, owner: str = "",
                    connection: object | None = None) -> ShareSession:
        """The member's share session for a request with `epoch` (0 opens a new one) from `owner` (a principal)
        on `connection`: a session is used and closed only on the connection that opened it."""
        key = (group, member)
        if epoch == INITIAL_EPOCH:
            if not opening_allowed:
                raise ShareSessionError(ErrorCode.invalid_share_session_epoch,
                                        "ShareAcknowledge cannot open a share session (epoch 0)")
            old = self.sessions.get(key)
            if old is not None and old.owner != owner:
                raise ShareSessionError(ErrorCode.unknown_member_id,
                                        f"member {member} of group {group} has a share session of another principal")
            if old is not None:
                del self.sessions[key]
                released = self._release(group, member, old)
                log.info("share group %s: member %s opened a new share session; %d records it held are offered "
                         "again", group, member, released)
            if sum(1 for g, _ in self.sessions if g == group) >= self.settings.max_sessions_per_group:
                self._evict_idle()
                if sum(1 for g, _ in self.sessions if g == group) >= self.settings.max_sessions_per_group:
                    raise ShareSessionError(ErrorCode.share_session_limit_reached,
                                            f"group {group} holds {self.settings.max_sessions_per_group} share "
                                            f"sessions on this broker (group.share.max.size)")
            if len(self.sessions) >= self.settings.max_sessions:
                self._evict_idle()
                if len(self.sessions) >= self.settings.max_sessions:
                    raise ShareSessionError(ErrorCode.share_session_limit_reached,
                                            f"this broker holds {len(self.sessions)} share sessions")
            session = self.sessions[key] = ShareSession(owner=owner, connection=connection)
            return session
        session = self.sessions.get(key)
        if session is None or session.connection is not connection:
            raise ShareSessionError(ErrorCode.share_session_not_found,
                                    f"no share session for member {member} of group {group} on this connection")
        expected = session.epoch + 1 if session.epoch < 2**31 - 1 else 1
        if epoch != FINAL_EPOCH and epoch != expected:
            log.info("share group %s: member %s sent share session epoch %d, expected %d", group, member, epoch,
                     expected)
            raise ShareSessionError(ErrorCode.invalid_share_session_epoch,
                                    f"share session epoch {epoch}, expected {expected}")
        return session

    def connection_closed(self, connection: object) -> None:
        """The sessions opened on a connection end with it: their records are offered again at once, not
        after the idle eviction's minute (issue 65)."""
        for key in [k for k, s in self.sessions.items() if s.connection is connection]:
            self.close(*key)

    def advance(self, session: ShareSession, epoch: int) -> None:
        """The request with `epoch` was accepted: the next one carries epoch + 1."""
        session.epoch = epoch
        session.last_used = time.monotonic()

    def close(self, group: str, member: str) -> None:
        session = self.sessions.pop((group, member), None)
        if session is not None:
            self._release(group, member, session)

    def _release(self, group: str, member: str, session: ShareSession) -> int:
        released = 0
        for topic, partition in session.partitions:
            held = self.held.get((group, topic, partition))
            if held is not None:
                released += held.state.release_member(member)
        return released

    def _evict_idle(self) -> None:
        """Sessions of members that stopped without closing them (SIGKILL): idle past twice the lock."""
        limit = time.monotonic() - max(60.0, 2 * self.settings.lock_ms / 1000)
        for key in [k for k, s in self.sessions.items() if s.last_used < limit]:
            self.close(*key)

    # -- share-partition state -----------------------------------------------------------------

    async def state(self, group: str, topic: str, topic_id: str, part: Partition) -> SharePartitionState:
        """This leader's state of the share-partition, loaded at the first use in its leader epoch."""
        key = (group, topic, part.index)
        held = self.held.get(key)
        if held is not None and held.leader_epoch == part.leader_epoch and held.topic_id == topic_id:
            return held.state
        lock = self._loading.setdefault(key, asyncio.Lock())
        async with lock:
            held = self.held.get(key)
            if held is not None and held.leader_epoch == part.leader_epoch and held.topic_id == topic_id:
                return held.state
            snapshot = await self.store.read(group, topic_id, part.index) if self.store is not None else None
            s = self.settings
            if snapshot is not None:
                state = SharePartitionState.restored(snapshot.start, list(snapshot.batches), s.delivery_limit,
                                                     s.max_locks)
            else:
                earliest = self.reset_policy(group) == "earliest"
                start = part.log.log_start_offset if earliest else part.high_watermark
                state = SharePartitionState(start, s.delivery_limit, s.max_locks)
            self.held[key] = _Held(state, part.leader_epoch, topic_id,
                                   snapshot.state_epoch if snapshot is not None else 0, snapshot is not None)
            self._loading.pop(key, None)
            return state

    async def revalidate(self, group: str, topic: str, topic_id: str, part: Partition) -> None:
        """A member opens a share session: if no record of the share-partition is held, the stored state
        is checked, so offsets altered or deleted while the group was empty take effect here."""
        key = (group, topic, part.index)
        held = self.held.get(key)
        if held is None or self.store is None or held.state.in_flight:
            return
        snapshot = await self.store.read(group, topic_id, part.index)
        if (snapshot is None and held.stored) or (snapshot is not None and snapshot.state_epoch != held.state_epoch):
            log.info("share group %s: the stored state of %s-%d changed (offsets altered or deleted); reloading",
                     group, topic, part.index)
            self.held.pop(key, None)

    def reset_policy(self, group: str) -> str:
        return self.group_config(group, "share.auto.offset.reset") if self.group_config else "latest"

    def lock_ms(self, group: str) -> int:
        return self.group_config(group, "share.record.lock.duration.ms") if self.group_config else \
            self.settings.lock_ms

    async def persist(self, group: str, topic: str, topic_id: str, part: Partition,
                      state: SharePartitionState) -> ErrorCode:
        """Writes the state before an acknowledgement is answered, so a new leader does not redeliver it."""
        if self.store is None:
            return ErrorCode.none
        held = self.held.get((group, topic, part.index))
        state_epoch = held.state_epoch if held is not None and held.state is state else 0
        start, batches = state.snapshot()
        error = await self.store.write(group, topic_id, part.index,
                                       Snapshot(state_epoch, part.leader_epoch, start, tuple(batches)))
        if error == ErrorCode.none and held is not None and held.state is state:
            held.stored = True
        elif error == ErrorCode.fenced_state_epoch:
            self.held.pop((group, topic, part.index), None)  # the offsets were altered meanwhile: reload
        return error

    def forget_unled(self, is_leader: Callable[[str, int], bool]) -> None:
        """Leadership moved away: the state goes (the next leader reads what was persisted)."""
        for key in [k for k in self.held if not is_leader(k[1], k[2])]:
            del self.held[key]

    def expire_locks(self) -> list[Key]:
        now = time.monotonic()
        return [key for key, held in self.held.items() if held.state.expire(now)]

    async def sweep(self, is_leader: Callable[[str, int], bool], wake: Callable[[str, int], None],
                    every_s: float = 0.2) -> None:
        """Expires locks (waking fetchers that wait for records) and drops state of partitions no longer led."""
        while True:
            await asyncio.sleep(every_s)
            try:
                for _group, topic, partition in self.expire_locks():
                    wake(topic, partition)
                self.forget_unled(is_leader)
                self._evict_idle()
            except Exception:  # the next round tries again; nothing here changes what is persisted
                log.exception("share-partition sweep failed")
