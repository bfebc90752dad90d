"""A fetcher's half of an incremental fetch session (KIP-227; Kafka's FetchSessionHandler).

The first request is a full one that opens a session (epoch 0). Once the leader answered with a
session id, each request names only the partitions whose fetch position changed since the session
last heard of them and the ones no longer wanted (forgotten); the leader answers only partitions
with something new. Any session error, a lost connection or a leader that answered without a
session starts over with a full request. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from ..protocol.fetch_sessions import FINAL_EPOCH, INITIAL_EPOCH, next_epoch

Key = tuple[str, int]


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """What a request says about one partition."""

    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int


@dataclass(slots=True)
class FetchPlan:
    session_id: int
    epoch: int
    partitions: dict[Key, PartitionFetch]  # to name in the request
    forgotten: list[Key]


SESSION_ERRORS = frozenset({ErrorCode.fetch_session_id_not_found.value, ErrorCode.invalid_fetch_session_epoch.value,
                            ErrorCode.fetch_session_topic_id_error.value})


@dataclass
class FetchSessionClient:
    enabled: bool = True
    session_id: int = 0
    epoch: int = INITIAL_EPOCH
    known: dict[Key, PartitionFetch] = field(default_factory=dict)  # what the leader's session holds
    _pending: FetchPlan | None = None
    _wanted: dict[Key, PartitionFetch] | None = None

    def plan(self, wanted: dict[Key, PartitionFetch], touched: set[Key] | None = None) -> FetchPlan:
        """The next request for `wanted`: everything when there is no session yet, else the changes —
        among `touched` only, when the caller knows nothing else can have changed."""
        if not self.enabled:
            plan = FetchPlan(0, FINAL_EPOCH, dict(wanted), [])
        elif self.session_id == 0:
            plan = FetchPlan(0, INITIAL_EPOCH, dict(wanted), [])
        else:
            known = self.known
            if touched is None:
                changed = {k: v for k, v in wanted.items() if known.get(k) != v}
                forgotten = [k for k in known if k not in wanted]
            else:
                changed = {k: wanted[k] for k in touched if k in wanted and known.get(k) != wanted[k]}
                forgotten = [k for k in touched if k in known and k not in wanted]
            plan = FetchPlan(self.session_id, self.epoch, changed, forgotten)
        self._pending, self._wanted = plan, wanted
        return plan

    def answered(self, error_code: int, session_id: int) -> bool:
        """The leader answered the last plan. False when the session is gone (the caller fetches again
        at once, in full); True when the answer's partitions are to be applied."""
        plan, wanted = self._pending, self._wanted
        self._pending = self._wanted = None
        if error_code in SESSION_ERRORS:
            self.reset()
            return False
        if plan is None or wanted is None or error_code != 0 or not self.enabled:
            return error_code == 0
        if plan.epoch == INITIAL_EPOCH:
            if session_id == 0:  # the leader keeps no session for us (cache full): full fetches
                self.reset()
                return True
            self.session_id, self.epoch, self.known = session_id, next_epoch(INITIAL_EPOCH), dict(wanted)
            return True
        if session_id != self.session_id:  # closed by the leader
            self.reset()
            return True
        self.epoch = next_epoch(self.epoch)
        for key in plan.forgotten:
            self.known.pop(key, None)
        self.known.update(plan.partitions)
        return True

    def reset(self) -> None:
        """Start over with a full request (a new connection, a session error)."""
        self.session_id, self.epoch, self.known = 0, INITIAL_EPOCH, {}
        self._pending = self._wanted = None
