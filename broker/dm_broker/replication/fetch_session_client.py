"""A fetcher's half of an incremental fetch session (KIP-227; Kafka's FetchSessionHandler).

The first request is a full one that opens a session (epoch 0). Once the leader answered with a
session id, each request names only the partitions whose fetch position changed since the session
last heard of them and the ones no longer wanted (forgotten); the leader answers only partitions
with something new. A request names at most `limit` partitions: the rest wait in `backlog` for the next
requests, which the fetcher sends without waiting, so thousands of new partitions (a topic created, a
restart) come to the leader's session in pieces, not in one request each side handles in one piece on its
event loop (issue 31). Any session error, a lost connection or a leader that answered without a
session starts over with a full request. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice

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
    limit: int | None = None  # partitions named per request at most (None: all); sessionless requests name all
    backlog: set[Key] = field(default_factory=set)  # changes left out of the last request by the limit
    # The leader kept no session for the last opening request: the next ones name everything (a leader
    # without a session answers only what a request names, so a bounded one would leave partitions unread).
    sessionless: bool = False
    _pending: FetchPlan | None = None

    def plan(self, wanted: dict[Key, PartitionFetch], touched: set[Key] | None = None) -> FetchPlan:
        """The next request for `wanted`: everything when there is no session yet, else the changes —
        among `touched` and the backlog only, when the caller knows nothing else can have changed."""
        if not self.enabled:
            plan = FetchPlan(0, FINAL_EPOCH, dict(wanted), [])
        elif self.session_id == 0:
            plan = FetchPlan(0, INITIAL_EPOCH, dict(wanted) if self.sessionless else self._bounded(wanted), [])
        else:
            known = self.known
            if touched is None:
                changed = {k: v for k, v in wanted.items() if known.get(k) != v}
                forgotten = [k for k in known if k not in wanted]
            else:
                touched = touched | self.backlog
                changed = {k: wanted[k] for k in touched if k in wanted and known.get(k) != wanted[k]}
                forgotten = [k for k in touched if k in known and k not in wanted]
            plan = FetchPlan(self.session_id, self.epoch, self._bounded(changed), forgotten)
        self._pending = plan
        return plan

    def _bounded(self, changes: dict[Key, PartitionFetch]) -> dict[Key, PartitionFetch]:
        if self.limit is None or len(changes) <= self.limit:
            self.backlog = set()
            return dict(changes)
        named = dict(islice(changes.items(), self.limit))
        self.backlog = {k for k in changes if k not in named}
        return named

    def answered(self, error_code: int, session_id: int) -> bool:
        """The leader answered the last plan. False when the session is gone (the caller fetches again
        at once, in full); True when the answer's partitions are to be applied."""
        plan = self._pending
        self._pending = None
        if error_code in SESSION_ERRORS:
            self.reset()
            return False
        if plan is None or error_code != 0 or not self.enabled:
            return error_code == 0
        if plan.epoch == INITIAL_EPOCH:
            if session_id == 0:  # the leader keeps no session for us (cache full): full fetches
                self.reset()
                self.sessionless = True
                return True
            self.sessionless = False
            self.session_id, self.epoch, self.known = session_id, next_epoch(INITIAL_EPOCH), dict(plan.partitions)
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
        self._pending = None
        self.backlog = set()
