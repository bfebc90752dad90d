"""The controller: broker registry and liveness, topic and partition state, leader election, ISR
changes. Every change is persisted through the store before it is visible or acknowledged, and
bumps the metadata version that brokers long-poll.

Safety rules (Kafka's):
- a leader is elected only from the ISR, unless the topic sets unclean.leader.election.enable;
- a fenced broker leaves every ISR (unless it is the last member, so the partition can come back
  with its data) and loses its leaderships;
- ISR changes requested by a leader are compare-and-set on the partition epoch and the leader
  epoch, so a deposed leader can never shrink the ISR to itself.

State changes run one at a time under a lock (the store is asynchronous: a file written in a thread,
or the Kubernetes API); the documents one change touches are saved concurrently.

Liveness has two paths: heartbeats (a broker silent for `broker.session.timeout.ms` is fenced: the
only way to notice a silent network partition), and a broker's session — a connection it holds open
to the controller: when it closes without a controlled shutdown, the broker's process is gone and
it is fenced at once, so its leaderships move in milliseconds instead of a session timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable

from pydantic import BaseModel

from .. import open_files
from ..config import (
    BROKER_PROPERTIES,
    DYNAMIC_BROKER_PROPERTIES,
    GROUP_PROPERTIES,
    BrokerConfig,
    ConfigError,
    Property,
    validate_topic_configs,
)
from ..quotas.entities import ClientQuota, EntityKey, entity_key, entity_refusal, value_refusal
from ..security.acls import AclBinding, AclFilter
from ..security.acls import validate as validate_acl
from ..security.scram import MAX_ITERATIONS as SCRAM_MAX_ITERATIONS
from ..security.scram import MECHANISMS as SCRAM_MECHANISMS
from ..security.scram import MIN_ITERATIONS as SCRAM_MIN_ITERATIONS
from ..steps import PARTITIONS_PER_STEP
from ..tasks import stop_tasks
from ..topics import InvalidTopicError, validate_topic_name
from .lost_replicas import lost_replicas, without_replica
from .models import (
    NO_LEADER,
    AlterIsrRequest,
    AlterIsrResponse,
    BrokerConfigsRequest,
    BrokerInfo,
    ClusterDoc,
    ClusterInfo,
    ClusterMetadata,
    CreatePartitionsRequest,
    CreateTopicRequest,
    DeletedTopic,
    GroupConfigsRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    PartitionResult,
    PartitionState,
    ProducerIdBlock,
    QuotaAlteration,
    QuotaResult,
    ReassignmentRequest,
    RegisterRequest,
    RegisterResponse,
    ScramAlteration,
    ScramResult,
    TopicDoc,
)
from .placement import PlacementError, assign, capacity_refusal
from .recovery import Reports, adopted_topics, most_advanced, recovered
from .store import ConflictError, ControllerStore

log = logging.getLogger(__name__)

MAX_PARTITIONS = 10_000
PRODUCER_ID_BLOCK = 1000
# After a controller recovered its state from its brokers, producer ids resume this far above the
# highest block a registered broker reported, so a block held by a broker that has not registered
# yet is not handed out again (a broker uses far fewer between two registrations).
PRODUCER_ID_RECOVERY_GAP = 1 << 20
TOMBSTONES_KEPT = 1000
# The liveness loop's repairs (offline partitions, recoveries, completed reassignments) each look at every
# partition: they run when the metadata changed since the last run, and otherwise this often, for what
# changes without a new version (a save that failed half-way).
REPAIR_EVERY_S = 2.0

RackResolver = Callable[[int, str | None], Awaitable[str | None]]


class ControllerError(Exception):
    """Carries a Kafka error name (e.g. "topic_already_exists") and a message."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


class ControllerSettings(BaseModel):
    """What a controller takes from the broker properties (spec.config under the operator); a change
    takes effect at once through `Controller.configure`."""

    session_timeout_ms: int = 9000
    unclean_election_default: bool = False  # the broker-level unclean.leader.election.enable
    recovery_timeout_ms: int = 300_000

    @classmethod
    def from_config(cls, config: BrokerConfig) -> ControllerSettings:
        return cls(session_timeout_ms=config["broker.session.timeout.ms"],
                   unclean_election_default=config["unclean.leader.election.enable"],
                   recovery_timeout_ms=config["controller.recovery.timeout.ms"])


class Controller:
    def __init__(self, store: ControllerStore, session_timeout_ms: int = 9000,
                 preferred_leader_check_ms: int = 5000, clock: Callable[[], float] = time.monotonic,
                 unclean_election_default: bool = False, rack_resolver: RackResolver | None = None,
                 expected_brokers: int | None = None, recovery_timeout_ms: int = 300_000) -> None:
        self.unclean_default = unclean_election_default  # the broker-level unclean.leader.election.enable
        self.store = store
        self.session_timeout = session_timeout_ms / 1000
        self.preferred_check = preferred_leader_check_ms / 1000
        self.clock = clock
        # Where a broker's rack comes from when the platform knows better than the broker (the
        # operator reads it from the broker's node); (node_id, rack the broker sent) -> rack.
        self.rack_resolver = rack_resolver
        self.cluster = ClusterDoc(cluster_id="")
        # No cluster document stored: the cluster id comes from the first broker that registers (a
        # controller that lost its state takes its brokers' id), or is new for a new cluster.
        self.established = False
        # Established from a broker's data: the controller is recovering its state from what its
        # brokers hold; until the brokers it expects have reported, it creates no topics.
        self.recovering_cluster = False
        self.expected_brokers = expected_brokers
        self.recovery_timeout = recovery_timeout_ms / 1000
        self.reports = Reports()
        self.open_file_limits: dict[int, int] = {}  # as brokers registered: new replicas must fit them
        self.topics: dict[str, TopicDoc] = {}
        self.brokers: dict[int, BrokerInfo] = {}
        self.last_heartbeat: dict[int, float] = {}
        self.sessions: dict[int, object] = {}  # node_id -> the token of its open session
        self.closed = False
        self.stopped = asyncio.Event()  # set by close(): open sessions end, so brokers find the next controller
        self.started_at = clock()
        self.incarnation = uuid.uuid4().hex
        self.version = 0
        # For metadata deltas: the version at which each topic's document last changed (or it went),
        # found by identity (a stored document is replaced, never changed in place) at each _bump.
        self._topic_changed_at: dict[str, int] = {}
        self._topics_seen: dict[str, TopicDoc] = {}
        self._repaired_version = -1  # the metadata version the last repairs looked at
        self._isr_queue: list[tuple[AlterIsrRequest, asyncio.Future[AlterIsrResponse]]] = []  # to store together
        self._isr_writer: asyncio.Task[None] | None = None
        self._next_repair = 0.0
        self.node_id = -1
        self._changed = asyncio.Event()
        self._lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self.internal_topic_setup: Callable[[], CreateTopicRequest | None] | None = None
        # Bytes the replicas a reassignment adds still lack, as their leaders last reported them.
        self.reassignment_lag: dict[tuple[str, int], int] = {}

    def configure(self, settings: ControllerSettings) -> None:
        """New settings, in effect from the next election, liveness check or recovery decision."""
        if settings != self.settings:
            log.info("controller settings: %s", settings.model_dump())
        self.unclean_default = settings.unclean_election_default
        self.session_timeout = settings.session_timeout_ms / 1000
        self.recovery_timeout = settings.recovery_timeout_ms / 1000

    @property
    def settings(self) -> ControllerSettings:
        return ControllerSettings(session_timeout_ms=round(self.session_timeout * 1000),
                                  unclean_election_default=self.unclean_default,
                                  recovery_timeout_ms=round(self.recovery_timeout * 1000))

    async def load(self) -> Controller:
        """Reads the persisted state; brokers get one session timeout from now to check in."""
        stored = await self.store.load_cluster()
        self.established = stored is not None
        self.cluster = stored if stored is not None else ClusterDoc(cluster_id="")
        self.topics = await self.store.load_topics()
        self._note_topic_changes()
        self.started_at = self.clock()
        if not self.established:
            log.info("no cluster document stored: the first broker to register gives the cluster id%s",
                     f" ({len(self.topics)} topics stored)" if self.topics else "")
        return self

    @classmethod
    async def open(cls, store: ControllerStore, **kwargs) -> Controller:
        return await cls(store, **kwargs).load()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._liveness_loop()), asyncio.create_task(self._preferred_loop())]

    async def close(self) -> None:
        self.closed = True
        self.stopped.set()
        self._changed.set()  # release metadata long-polls so the HTTP server can stop at once
        await stop_tasks(*self._tasks)

    def _bump(self) -> None:
        self.version += 1
        self._note_topic_changes()
        self._changed.set()
        self._changed = asyncio.Event()

    def _note_topic_changes(self) -> None:
        """Records the current version for each topic whose document was replaced, added or removed
        since the last look: one identity check per topic, not per partition."""
        for name, doc in self.topics.items():
            if self._topics_seen.get(name) is not doc:
                self._topics_seen[name] = doc
                self._topic_changed_at[name] = self.version
        if len(self._topics_seen) != len(self.topics):
            for name in [n for n in self._topics_seen if n not in self.topics]:
                del self._topics_seen[name]
                self._topic_changed_at[name] = self.version

    def metadata(self, since: int = -1) -> ClusterMetadata:
        """The metadata at the current version: all of it, or (`since` a version of this incarnation)
        only the topics changed after `since` and the names of those removed (ADR 0033). Brokers,
        configs, ACLs, credentials and quotas always come whole; they are small."""
        topics, removed, delta_from = self.topics, [], -1
        if 0 <= since <= self.version:
            changed = [n for n, v in self._topic_changed_at.items() if v > since]
            topics = {n: self.topics[n] for n in changed if n in self.topics}
            removed = [n for n in changed if n not in self.topics]
            delta_from = since
        return ClusterMetadata(version=self.version, incarnation=self.incarnation, cluster_id=self.cluster.cluster_id,
                               controller_id=self.node_id, brokers=list(self.brokers.values()), topics=topics,
                               broker_configs=self.cluster.broker_configs,
                               deleted_topics=self.cluster.deleted_topics, acls=self.cluster.acls,
                               scram=self.cluster.scram, quotas=self.cluster.quotas,
                               group_configs=self.cluster.group_configs, delta_from=delta_from,
                               removed_topics=removed)

    def partition_count(self) -> int:
        """The partitions of all topics: the controller's long-lived objects, which a process hosting it
        freezes as they grow (ADR 0040)."""
        return sum(len(topic.partitions) for topic in self.topics.values())

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo(cluster_id=self.cluster.cluster_id if self.established else None,
                           incarnation=self.incarnation)

    def in_recovery_window(self) -> bool:
        """Recovering the state from the brokers, and not all expected brokers have reported yet:
        a topic created now could take the name of one a broker still to report holds."""
        if not self.recovering_cluster:
            return False
        if self.expected_brokers is not None and len(self.reports.held) >= self.expected_brokers:
            return False
        waited = self.clock() - self.started_at
        return waited < (self.recovery_timeout if self.expected_brokers is not None else self.session_timeout)

    async def ensure_cluster_document(self) -> bool:
        """Writes the cluster document again from this controller's state if the store lost it (a
        wiped status): the store is where the next controller starts from. True when it did."""
        if not self.established:
            return False
        async with self._lock:
            if await self.store.load_cluster() is not None:
                return False
            log.warning("the stored cluster document is gone; writing cluster %s's again from the controller's state",
                        self.cluster.cluster_id)
            self.cluster = await self.store.save_cluster(self.cluster, -1)
            return True

    def _tombstoned(self) -> set[str]:
        return {t.topic_id for t in self.cluster.deleted_topics}

    async def wait_for_change(self, known_version: int, incarnation: str, timeout: float,
                              delta: bool = False) -> ClusterMetadata:
        """Long-poll: returns once the metadata is newer than `known_version` (or at timeout); with
        `delta`, only what changed since `known_version` when that is a version of this incarnation."""
        if incarnation == self.incarnation and known_version >= self.version:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)
        return self.metadata(known_version if delta and incarnation == self.incarnation else -1)

    # -- brokers ---------------------------------------------------------------------------

    def live_brokers(self) -> list[BrokerInfo]:
        return [b for b in self.brokers.values() if not b.fenced and not b.shutting_down]

    def _live_ids(self) -> set[int]:
        return {b.node_id for b in self.live_brokers()}

    def in_grace(self) -> bool:
        """The first session after a (re)start: brokers that served until now are re-registering."""
        return self.clock() - self.started_at < self.session_timeout

    async def register(self, req: RegisterRequest) -> RegisterResponse:
        rack = req.rack
        if self.rack_resolver is not None:
            rack = await self.rack_resolver(req.node_id, req.rack)
        async with self._lock:
            if self.established and req.cluster_id and req.cluster_id != self.cluster.cluster_id:
                raise ControllerError("inconsistent_cluster_id",
                                      f"broker {req.node_id}'s data belongs to cluster {req.cluster_id}; this "
                                      f"controller serves cluster {self.cluster.cluster_id}")
            self.reports.record(req)
            self.open_file_limits[req.node_id] = req.open_file_limit
            if not self.established:
                await self._establish(req)
            elif req.producer_id_end > self.cluster.next_producer_id:
                await self._save_cluster(self.cluster.model_copy(update={"next_producer_id": req.producer_id_end}))
            old = self.brokers.get(req.node_id)
            epoch = (old.epoch if old else 0) + 1
            if old is not None and old.incarnation != req.incarnation and not old.fenced:
                # A new process: whatever the old one led may have lost unflushed data.
                await self._fence(req.node_id, "restarted")
            await self._forget_lost_replicas(req)
            self.brokers[req.node_id] = BrokerInfo(node_id=req.node_id, host=req.host, port=req.port, rack=rack,
                                                   listeners=dict(req.listeners), incarnation=req.incarnation,
                                                   epoch=epoch, stray_logs=list(req.stray_logs))
            self.last_heartbeat[req.node_id] = self.clock()
            self.sessions.pop(req.node_id, None)  # a session belongs to one registration
            log.info("broker %d registered at %s:%d (epoch %d%s)", req.node_id, req.host, req.port, epoch,
                     f", rack {rack}" if rack else "")
            adopted = adopted_topics(req.node_id, self.reports, self.topics, self._tombstoned())
            for doc in adopted:
                verb = "more of recovering" if doc.name in self.topics else "adopting"
                log.warning("%s topic %s (id %s, %d partitions) from what broker %d holds", verb, doc.name,
                            doc.topic_id, len(doc.partitions), req.node_id)
            await self._save_all(adopted)
            await self._recover_partitions()
            await self._ensure_internal_topics()
            await self._elect_offline_partitions()
            self._bump()
            return RegisterResponse(broker_epoch=epoch, cluster_id=self.cluster.cluster_id,
                                    incarnation=self.incarnation)

    async def _forget_lost_replicas(self, req: RegisterRequest) -> None:
        """A broker back with a new log directory and without logs it was in sync for leaves those ISRs
        (ADR 0047): it must not lead them with nothing, nor make the others truncate to its empty log."""
        lost = lost_replicas(req, self.topics)
        if not lost:
            return
        shown = ", ".join(f"{name}-{index}" for name, index in lost[:5]) + (", ..." if len(lost) > 5 else "")
        log.warning("broker %d came back with new log directories (%s) and without %d replicas it was in sync for "
                    "(%s): it leaves their ISRs and catches up", req.node_id, ", ".join(req.new_log_dirs),
                    len(lost), shown)
        changed: dict[str, TopicDoc] = {}
        for name, index in lost:
            doc = changed.get(name, self.topics[name])
            new = without_replica(doc.partitions[index], req.node_id)
            if new.leader == NO_LEADER:
                new = self._elected(doc, new, exclude=req.node_id, index=index)
            if new.leader == NO_LEADER:
                log.error("%s-%d has no in-sync replica left: broker %d held its last copy. It stays offline until "
                          "an unclean election (dm topics elect-leaders --unclean) accepts losing what only that "
                          "broker held", name, index, req.node_id)
            changed[name] = self._replaced(doc, index, new)
        await self._save_all(list(changed.values()))

    async def _establish(self, req: RegisterRequest) -> None:
        """The first registration of a controller with no cluster document: a broker that already
        belongs to a cluster (or holds data) means the state was lost, and is recovered from the
        brokers; otherwise this is a new cluster."""
        recovering = bool(req.cluster_id or req.holdings)
        cluster_id = req.cluster_id or ClusterDoc().cluster_id
        next_pid = req.producer_id_end + (PRODUCER_ID_RECOVERY_GAP if recovering else 0)
        doc = ClusterDoc(cluster_id=cluster_id, next_producer_id=next_pid)
        self.cluster = await self.store.save_cluster(doc, -1)
        self.established = True
        self.recovering_cluster = recovering
        if recovering:
            log.warning("no controller state stored: cluster %s %s; recovering its topics from what its brokers "
                        "hold (producer ids resume at %d)", cluster_id,
                        f"(the id broker {req.node_id} holds)" if req.cluster_id else "(a new id: broker "
                        f"{req.node_id} holds data from before cluster ids were recorded)", next_pid)
        else:
            log.info("new cluster %s", cluster_id)

    async def _recover_partitions(self) -> bool:
        """Gives a leader to each recovering partition whose replicas have all reported."""
        live = self._live_ids()
        reported = set(self.reports.held)
        changed = []
        for doc in self.topics.values():
            if not any(p.recovering for p in doc.partitions):
                continue
            partitions = []
            for i, p in enumerate(doc.partitions):
                new = recovered(p, self.reports.holders(doc.name, doc.topic_id, i), reported, live)
                if new is not None:
                    log.warning("%s-%d recovered: broker %d leads in epoch %d (the most advanced log of %s)",
                                doc.name, i, new.leader, new.leader_epoch, p.replicas)
                partitions.append(new or p)
            if partitions != doc.partitions:
                changed.append(doc.model_copy(update={"partitions": partitions}))
        await self._save_all(changed)
        return bool(changed)

    async def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResponse:
        broker = self.brokers.get(req.node_id)
        if broker is None or broker.epoch != req.broker_epoch:
            return HeartbeatResponse(ok=False, reregister=True)
        self.last_heartbeat[req.node_id] = self.clock()
        if req.stray_logs != broker.stray_logs:
            broker.stray_logs = list(req.stray_logs)
            self._bump()
        self._record_lag(req.node_id, req.reassignment_lag)
        if req.leaderless_holdings:
            self.reports.refresh(req.node_id, req.leaderless_holdings)
        broker.tls = dict(req.tls)  # for the operator's certificate rotation; not part of the metadata
        if broker.fenced and not broker.shutting_down:
            async with self._lock:
                if broker.fenced and not broker.shutting_down and self.brokers.get(req.node_id) is broker:
                    broker.fenced = False
                    log.info("broker %d is alive again", req.node_id)
                    await self._recover_partitions()
                    await self._elect_offline_partitions()
                    self._bump()
        return HeartbeatResponse(ok=True, fenced=broker.fenced)

    def _record_lag(self, node_id: int, lag: dict[str, int]) -> None:
        reported = {}
        for key, value in lag.items():
            topic, _, partition = key.rpartition(":")
            if partition.isdigit():
                reported[(topic, int(partition))] = value
        for key in [k for k in self.reassignment_lag if k not in reported]:
            doc = self.topics.get(key[0])
            if doc is None or key[1] >= len(doc.partitions) or doc.partitions[key[1]].leader == node_id:
                self.reassignment_lag.pop(key, None)  # its leader no longer reports it: copied, or gone
        self.reassignment_lag.update(reported)

    async def _liveness_loop(self) -> None:
        while True:
            await asyncio.sleep(min(0.25, self.session_timeout / 4))
            try:
                await self.check_liveness()
            except Exception:  # a store that is unavailable for a moment: try again next round
                log.exception("liveness check failed")

    async def check_liveness(self) -> None:
        if self.in_grace():
            return  # after a controller restart, give every broker one session to check in
        now = self.clock()
        async with self._lock:
            changed = False
            for node_id, broker in self.brokers.items():
                if not broker.fenced and now - self.last_heartbeat.get(node_id, 0) > self.session_timeout:
                    await self._fence(node_id, "session timed out")
                    changed = True
            # Repair: a leader that is not live (a fence whose saves failed, a broker that never came
            # back after a controller restart) gives its partitions to another ISR member; a
            # reassignment whose new replicas are all in sync completes.
            if changed or self.version != self._repaired_version or now >= self._next_repair:
                self._repaired_version, self._next_repair = self.version, now + REPAIR_EVERY_S
                changed |= await self._recover_partitions()
                changed |= await self._elect_offline_partitions()
                changed |= await self._complete_reassignments()
            if changed:
                self._bump()

    async def fence(self, node_id: int, reason: str) -> bool:
        """Fences a broker now (its process is known to be gone); False if there was nothing to do."""
        async with self._lock:
            broker = self.brokers.get(node_id)
            if broker is None or broker.fenced or broker.shutting_down:
                return False
            await self._fence(node_id, reason)
            self._bump()
            return True

    def open_session(self, node_id: int, broker_epoch: int) -> object | None:
        """A broker holds a connection open for as long as its process lives; the token identifies it."""
        broker = self.brokers.get(node_id)
        if broker is None or broker.epoch != broker_epoch:
            return None
        token = object()
        self.sessions[node_id] = token
        return token

    def has_session(self, node_id: int) -> bool:
        return node_id in self.sessions

    async def close_session(self, node_id: int, token: object, broker_epoch: int) -> None:
        """The connection closed: without a controlled shutdown first, the process died."""
        if self.closed or self.sessions.get(node_id) is not token:
            # A stopped controller (its cluster deleted: the brokers go with it) fences nobody; a
            # newer session (or registration) replaced this one.
            return
        del self.sessions[node_id]
        broker = self.brokers.get(node_id)
        if broker is None or broker.epoch != broker_epoch or broker.shutting_down:
            return
        await self.fence(node_id, "its connection to the controller closed")

    async def _fence(self, node_id: int, reason: str) -> None:
        broker = self.brokers[node_id]
        broker.fenced = True
        log.warning("fencing broker %d: %s", node_id, reason)
        await self._move_away_from(node_id)

    async def controlled_shutdown(self, node_id: int, broker_epoch: int) -> list[tuple[str, int]]:
        """Moves leadership off a broker that is stopping; returns partitions it still leads
        (no other ISR member to take over)."""
        async with self._lock:
            broker = self.brokers.get(node_id)
            if broker is None or broker.epoch != broker_epoch:
                raise ControllerError("stale_broker_epoch", f"broker {node_id} epoch {broker_epoch} is not current")
            broker.shutting_down = True
            await self._move_away_from(node_id)
            self._bump()
            return [(name, i) for name, doc in self.topics.items() for i, p in enumerate(doc.partitions)
                    if p.leader == node_id]

    async def unregister(self, node_id: int) -> None:
        """Forgets a broker that was removed from the cluster (scale-down); refused while it still
        holds replicas."""
        async with self._lock:
            hosting = [f"{name}-{i}" for name, doc in self.topics.items() for i, p in enumerate(doc.partitions)
                       if node_id in p.replicas]
            if hosting:
                shown = ", ".join(hosting[:5]) + (", ..." if len(hosting) > 5 else "")
                raise ControllerError("invalid_request", f"broker {node_id} still holds {len(hosting)} replicas "
                                                         f"({shown})")
            if self.brokers.pop(node_id, None) is not None:
                self.last_heartbeat.pop(node_id, None)
                self.sessions.pop(node_id, None)
                log.info("broker %d unregistered", node_id)
                self._bump()

    async def _move_away_from(self, node_id: int) -> None:
        """Every partition off a fenced or stopping broker's ISR and leadership, in ADR 0039's steps: at
        10,000 partitions one pass held the controller's loop for about 50 ms (2026-12-07). The lock is held
        throughout, so no other change to the topics comes in between."""
        changed = []
        done = 0
        for doc in self.topics.values():
            partitions = []
            for index, p in enumerate(doc.partitions):
                done += 1
                if done % PARTITIONS_PER_STEP == 0:
                    await asyncio.sleep(0)
                new = p
                if node_id in p.isr and len(p.isr) > 1:
                    new = new.model_copy(update={"isr": [r for r in p.isr if r != node_id],
                                                 "partition_epoch": p.partition_epoch + 1})
                if new.leader == node_id:
                    new = self._elected(doc, new, exclude=node_id, index=index)
                partitions.append(new)
            if any(a is not b for a, b in zip(partitions, doc.partitions, strict=True)):
                changed.append(doc.model_copy(update={"partitions": partitions}))
        await self._save_all(changed)

    def _elected(self, doc: TopicDoc, p: PartitionState, exclude: int = NO_LEADER,
                 unclean: bool | None = None, index: int | None = None) -> PartitionState:
        """A leader from the live ISR; with none, a live out-of-sync replica when unclean election is
        allowed (`unclean`, or else the topic's unclean.leader.election.enable): the one whose log was the
        most advanced when it registered (partition `index`; else the first); else no leader."""
        live = self._live_ids() - {exclude}
        candidates = [r for r in p.replicas if r in p.isr and r in live]
        isr = p.isr
        if unclean is None:
            unclean = doc.configs.get("unclean.leader.election.enable", str(self.unclean_default).lower()) == "true"
        if not candidates and unclean:
            candidates = [r for r in p.replicas if r in live]
            if candidates and index is not None:
                candidates = [most_advanced(self.reports.holders(doc.name, doc.topic_id, index), candidates)]
            if candidates:
                log.warning("%s: unclean election of broker %d (records may be lost)", doc.name, candidates[0])
                isr = [candidates[0]]
        leader = candidates[0] if candidates else NO_LEADER
        if leader == p.leader and isr == p.isr:
            return p
        return p.model_copy(update={"leader": leader, "isr": isr, "leader_epoch": p.leader_epoch + 1,
                                    "partition_epoch": p.partition_epoch + 1})

    async def _elect_offline_partitions(self) -> bool:
        """Elects leaders for partitions whose leader is not live. During the grace period after a
        controller restart a leader that has not re-registered yet is not replaced: it is probably
        serving, and about to check in."""
        live = self._live_ids()
        grace = self.in_grace()
        changed = []
        for doc in self.topics.values():
            partitions = []
            for index, p in enumerate(doc.partitions):
                waiting_for_leader = grace and p.leader not in self.brokers
                lost = p.leader == NO_LEADER or (p.leader not in live and not waiting_for_leader)
                offline = lost and not p.recovering  # a recovering partition waits for its replicas
                partitions.append(self._elected(doc, p, index=index) if offline else p)
            if any(a is not b for a, b in zip(partitions, doc.partitions, strict=True)):
                changed.append(doc.model_copy(update={"partitions": partitions}))
        await self._save_all(changed)
        return bool(changed)

    async def _preferred_loop(self) -> None:
        while True:
            await asyncio.sleep(self.preferred_check)
            try:
                if await self.elect_preferred_leaders():
                    self._bump()
            except Exception:
                log.exception("preferred leader election failed")

    async def elect_preferred_leaders(self) -> bool:
        """Moves leadership back to each partition's first replica when it is alive and in sync."""
        async with self._lock:
            live = self._live_ids()
            changed = []
            for doc in self.topics.values():
                partitions = []
                for p in doc.partitions:
                    partitions.append(self._preferred(p, live) or p)
                if partitions != doc.partitions:
                    changed.append(doc.model_copy(update={"partitions": partitions}))
            await self._save_all(changed)
            return bool(changed)

    @staticmethod
    def _preferred(p: PartitionState, live: set[int]) -> PartitionState | None:
        """The partition led by its first replica, when that one is live and in sync and does not lead."""
        preferred = p.replicas[0]
        if p.leader == preferred or preferred not in live or preferred not in p.isr:
            return None
        return p.model_copy(update={"leader": preferred, "leader_epoch": p.leader_epoch + 1,
                                    "partition_epoch": p.partition_epoch + 1})

    @staticmethod
    def _replaced(doc: TopicDoc, index: int, new: PartitionState) -> TopicDoc:
        partitions = list(doc.partitions)
        partitions[index] = new
        return doc.model_copy(update={"partitions": partitions})

    async def _change_partitions(self, wanted: list[tuple[str, int]],
                                 change: Callable[[int, TopicDoc, PartitionState], PartitionState]
                                 ) -> list[PartitionResult]:
        """Applies `change(i, doc, partition)` to the i-th wanted partition (a ControllerError is that
        partition's result), saves every changed topic, then announces the new metadata."""
        results = []
        changed: dict[str, TopicDoc] = {}
        for i, (topic, index) in enumerate(wanted):
            doc = changed.get(topic) or self.topics.get(topic)
            if doc is None or not 0 <= index < len(doc.partitions):
                results.append(PartitionResult(topic=topic, partition=index, error="unknown_topic_or_partition",
                                               message=f"{topic}-{index} does not exist"))
                continue
            try:
                new = change(i, doc, doc.partitions[index])
            except ControllerError as exc:
                results.append(PartitionResult(topic=topic, partition=index, error=exc.error, message=exc.message))
                continue
            if new is not doc.partitions[index]:
                changed[topic] = self._replaced(doc, index, new)
            results.append(PartitionResult(topic=topic, partition=index))
        await self._save_all(list(changed.values()))
        if changed:
            self._bump()
        return results

    # -- ISR -------------------------------------------------------------------------------

    async def alter_isr(self, req: AlterIsrRequest) -> AlterIsrResponse:
        """An ISR change from a partition's leader, answered once stored. Changes that arrive while
        others are being stored are stored together, one save per topic (group commit): a broker back
        from a restart asks to rejoin the ISR of every partition it follows at once, and at thousands of
        partitions one save each (a Topic resource's whole status, for the operator) took minutes."""
        fut: asyncio.Future[AlterIsrResponse] = asyncio.get_running_loop().create_future()
        self._isr_queue.append((req, fut))
        if self._isr_writer is None or self._isr_writer.done():
            self._isr_writer = asyncio.create_task(self._write_isr_changes())
        return await fut

    async def alter_isr_batch(self, reqs: list[AlterIsrRequest]) -> list[AlterIsrResponse]:
        """Each change answered on its own; one that could not be stored is refused as `not_stored`."""
        outcomes = await asyncio.gather(*(self.alter_isr(r) for r in reqs), return_exceptions=True)
        return [o if isinstance(o, AlterIsrResponse) else AlterIsrResponse(error="not_stored") for o in outcomes]

    async def _write_isr_changes(self) -> None:
        while self._isr_queue:
            batch, self._isr_queue = self._isr_queue, []
            try:
                async with self._lock:
                    await self._apply_isr_changes(batch)
            except BaseException as exc:  # (cancelled) every waiter hears of it, none waits for ever
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc if isinstance(exc, Exception) else ControllerError(
                            "controller_unavailable", "the controller is stopping"))
                if not isinstance(exc, Exception):
                    raise

    async def _apply_isr_changes(self, batch: list[tuple[AlterIsrRequest, asyncio.Future[AlterIsrResponse]]]) -> None:
        changed: dict[str, TopicDoc] = {}
        accepted: dict[str, list[tuple[asyncio.Future[AlterIsrResponse], AlterIsrRequest, PartitionState,
                                       PartitionState]]] = {}
        live = self._live_ids()
        for req, fut in batch:
            doc = changed.get(req.topic) or self.topics.get(req.topic)
            refusal, new = self._isr_change(req, doc, live)
            if refusal is not None:
                fut.set_result(refusal)
                continue
            old = doc.partitions[req.partition]
            changed[req.topic] = self._replaced(doc, req.partition, new)
            accepted.setdefault(req.topic, []).append((fut, req, old, new))
        names = list(changed)
        saved = await asyncio.gather(*(self._save(changed[n]) for n in names), return_exceptions=True)
        for name, outcome in zip(names, saved, strict=True):
            for fut, req, old, new in accepted[name]:
                if isinstance(outcome, BaseException):
                    fut.set_exception(outcome)
                    continue
                log.info("%s-%d: ISR %s -> %s", req.topic, req.partition, old.isr, new.isr)
                if old.reassigning and not new.reassigning:
                    log.info("%s-%d: reassignment to %s complete (leader %d)", req.topic, req.partition, new.replicas,
                             new.leader)
                fut.set_result(AlterIsrResponse(state=new))
        if any(not isinstance(outcome, BaseException) for outcome in saved):
            self._bump()

    def _isr_change(self, req: AlterIsrRequest, doc: TopicDoc | None,
                    live: set[int]) -> tuple[AlterIsrResponse | None, PartitionState | None]:
        """(a refusal, None) or (None, the partition with the new ISR), checked against `doc` as the
        changes before it in the same batch left it."""
        if doc is None or not 0 <= req.partition < len(doc.partitions):
            return AlterIsrResponse(error="unknown_topic_or_partition"), None
        p = doc.partitions[req.partition]
        broker = self.brokers.get(req.node_id)
        if broker is None or broker.epoch != req.broker_epoch or broker.fenced:
            return AlterIsrResponse(error="stale_broker_epoch", state=p), None
        if p.leader != req.node_id or p.leader_epoch != req.leader_epoch:
            return AlterIsrResponse(error="fenced_leader_epoch", state=p), None
        if p.partition_epoch != req.partition_epoch:
            return AlterIsrResponse(error="invalid_update_version", state=p), None
        new_isr = sorted(set(req.new_isr), key=p.replicas.index) if set(req.new_isr) <= set(p.replicas) else None
        if new_isr is None or req.node_id not in new_isr:
            return AlterIsrResponse(error="invalid_request", state=p), None
        if any(r not in live and r not in p.isr for r in new_isr):
            return AlterIsrResponse(error="ineligible_replica", state=p), None
        return None, self._completed(p.model_copy(update={"isr": new_isr, "partition_epoch": p.partition_epoch + 1}))

    # -- reassignments (KIP-455) and elections (KIP-460) --------------------------------------

    async def alter_reassignments(self, requests: list[ReassignmentRequest]) -> list[PartitionResult]:
        """Starts (or replaces, or with replicas=None cancels) partition reassignments: the target
        replicas are added, fetch and catch up, join the ISR; then leadership leaves the replicas
        being removed and they are dropped (their brokers delete the data)."""
        def change(i: int, doc: TopicDoc, p: PartitionState) -> PartitionState:
            r = requests[i]
            new = self._reassigned(doc, p, r.replicas)
            if hosted is not None:
                added = Counter(new.replicas) - Counter(p.replicas)
                self._refuse_past_capacity(hosted, added)
                hosted.update(added)
            log.info("%s-%d: reassignment %s (replicas %s, adding %s, removing %s)", r.topic, r.partition,
                     "cancelled" if r.replicas is None else f"to {r.replicas}", new.replicas, new.adding_replicas,
                     new.removing_replicas)
            return new

        async with self._lock:
            gaining = {b for r in requests for b in (r.replicas or [])}
            hosted = None if self._surely_fits(gaining, 0) else self._hosted_replicas()
            return await self._change_partitions([(r.topic, r.partition) for r in requests], change)

    def _surely_fits(self, brokers: Iterable[int], new_partitions: int) -> bool:
        """Whether each of these brokers could host a replica of every partition, `new_partitions` more
        included: then no count is needed (the usual case: a limit far above the cluster's partitions), and
        creating thousands of topics one by one does not count every replica each time."""
        limits = [limit for node in brokers if (limit := self.open_file_limits.get(node, 0)) > 0]
        if not limits:
            return True
        return min(limits) - open_files.RESERVED_FOR_LOGS >= self.partition_count() + new_partitions

    def _refuse_past_capacity(self, hosted: Counter[int], added: Counter[int] | dict[int, int]) -> None:
        refusal = capacity_refusal(hosted, added, self.open_file_limits, open_files.RESERVED_FOR_LOGS)
        if refusal is not None:
            raise ControllerError("policy_violation", refusal)

    def _hosted_replicas(self, leaving_out: str | None = None) -> Counter[int]:
        """Partition replicas per broker, over every topic but `leaving_out`."""
        hosted: Counter[int] = Counter()
        for name, doc in self.topics.items():
            if name != leaving_out:
                hosted.update(r for p in doc.partitions for r in p.replicas)
        return hosted

    def _reassigned(self, doc: TopicDoc, p: PartitionState, target: list[int] | None) -> PartitionState:
        if p.recovering:
            raise ControllerError("invalid_replica_assignment", "the partition is being recovered from its brokers' "
                                                                "logs; reassign it once it has a leader")
        if target is None:
            if not p.reassigning:
                raise ControllerError("no_reassignment_in_progress", "no reassignment of this partition is in progress")
            original = p.original_replicas
            isr = [r for r in p.isr if r in original]
            unclean = doc.configs.get("unclean.leader.election.enable", str(self.unclean_default).lower()) == "true"
            if not isr and not unclean:
                # Kafka refuses this revert too: the original replicas are not in sync, so leading
                # from one of them would lose what only the added replicas hold.
                raise ControllerError("invalid_replica_assignment",
                                      f"cannot revert to {original}: none of them is in the ISR {p.isr}, so the "
                                      f"revert would be an unclean leader election (allow it with "
                                      f"unclean.leader.election.enable=true, or let the reassignment finish)")
            reverted = p.model_copy(update={"replicas": original, "isr": isr or p.isr, "adding_replicas": [],
                                            "removing_replicas": [], "partition_epoch": p.partition_epoch + 1})
            if reverted.leader not in original:  # it had moved to an added replica: back to an original one
                reverted = self._elected(doc, reverted.model_copy(update={"isr": isr}), exclude=reverted.leader)
            return reverted
        if not target or len(set(target)) != len(target):
            raise ControllerError("invalid_replica_assignment", f"target replicas {target} must be distinct and "
                                                                "not empty")
        unknown = [b for b in target if b not in self.brokers]
        if unknown:
            raise ControllerError("invalid_replica_assignment", f"brokers {unknown} are not registered")
        original = p.original_replicas
        if target == original and not p.reassigning:
            return p
        adding = [t for t in target if t not in original]
        removing = [o for o in original if o not in target]
        replicas = target + removing
        new = p.model_copy(update={"replicas": replicas, "adding_replicas": adding, "removing_replicas": removing,
                                   "isr": [r for r in p.isr if r in replicas],
                                   "partition_epoch": p.partition_epoch + 1})
        return self._completed(new)

    def _completed(self, p: PartitionState) -> PartitionState:
        """A reassignment whose added replicas are all in the ISR becomes the target assignment;
        leadership moves first if the leader is being removed. Unchanged when it must wait."""
        if not p.reassigning or not set(p.adding_replicas) <= set(p.isr):
            return p
        target = p.target_replicas
        isr = [r for r in p.isr if r in target]
        live = self._live_ids()
        leader, epoch = p.leader, p.leader_epoch
        if leader not in target:
            candidates = [r for r in target if r in isr and r in live]
            if not candidates:
                return p  # no in-sync target replica can lead yet
            leader, epoch = candidates[0], epoch + 1
        if not isr:
            return p
        return p.model_copy(update={"replicas": target, "isr": isr, "leader": leader, "leader_epoch": epoch,
                                    "adding_replicas": [], "removing_replicas": [],
                                    "partition_epoch": p.partition_epoch + 1})

    async def _complete_reassignments(self) -> bool:
        changed = []
        for doc in self.topics.values():
            if not any(p.reassigning for p in doc.partitions):
                continue
            partitions = [self._completed(p) for p in doc.partitions]
            if any(a is not b for a, b in zip(partitions, doc.partitions, strict=True)):
                changed.append(doc.model_copy(update={"partitions": partitions}))
        await self._save_all(changed)
        return bool(changed)

    async def elect_leaders(self, unclean: bool, partitions: list[tuple[str, int]] | None) -> list[PartitionResult]:
        """ElectLeaders: the preferred replica (the first) when it is live and in sync; or, unclean,
        any live replica of a partition without a live leader (in-sync ones first)."""
        def change(i: int, doc: TopicDoc, p: PartitionState) -> PartitionState:
            if p.recovering:
                if not unclean:
                    raise ControllerError("preferred_leader_not_available", "the partition is being recovered: not "
                                                                            "every replica has reported yet")
                index = wanted[i][1]
                new = recovered(p, self.reports.holders(doc.name, doc.topic_id, index), set(self.reports.held),
                                live, unclean=True)
                if new is None:
                    raise ControllerError("eligible_leaders_not_available", "no replica that reported its log is live")
                log.warning("%s-%d: unclean election of broker %d, the most advanced of the replicas that reported",
                            doc.name, index, new.leader)
                return new
            if unclean:
                if p.leader in live:
                    raise ControllerError("election_not_needed", f"broker {p.leader} leads and is live")
                new = self._elected(doc, p, unclean=True, index=wanted[i][1])
                if new.leader == NO_LEADER:
                    raise ControllerError("eligible_leaders_not_available", "no replica of the partition is live")
                return new
            if p.leader == p.replicas[0]:
                raise ControllerError("election_not_needed", f"broker {p.leader} already leads")
            new = self._preferred(p, live)
            if new is None:
                raise ControllerError("preferred_leader_not_available",
                                      f"preferred replica {p.replicas[0]} is not live and in sync")
            return new

        async with self._lock:
            live = self._live_ids()
            wanted = partitions if partitions is not None else [
                (name, i) for name, doc in self.topics.items() for i in range(len(doc.partitions))]
            return await self._change_partitions(wanted, change)

    # -- dynamic broker configs --------------------------------------------------------------------

    async def alter_broker_configs(self, req: BrokerConfigsRequest) -> ClusterDoc:
        """Dynamic broker configs, for one broker ("<id>") or as cluster-wide defaults (""), kept in
        the cluster document and delivered with the metadata."""
        if req.broker and not req.broker.isdigit():
            raise ControllerError("invalid_request", f"broker {req.broker!r}: expected a broker id or \"\"")

        def refusal(name: str) -> str | None:
            if name in DYNAMIC_BROKER_PROPERTIES:
                return None
            known = "unknown broker property" if name not in BROKER_PROPERTIES else "not changeable at run time"
            return f"{name}: {known} (dynamic in dm: {', '.join(sorted(DYNAMIC_BROKER_PROPERTIES))})"

        return await self._alter_config_map("broker_configs", req.broker, req.configs, BROKER_PROPERTIES, refusal,
                                            req.replace, req.validate_only)

    async def alter_group_configs(self, req: GroupConfigsRequest) -> ClusterDoc:
        """A group's configs (share.auto.offset.reset, ...), kept in the cluster document."""
        if not req.group:
            raise ControllerError("invalid_request", "a group config needs a group id")

        def refusal(name: str) -> str | None:
            return None if name in GROUP_PROPERTIES else \
                f"{name}: not a group config dm has (it has {', '.join(sorted(GROUP_PROPERTIES))})"

        return await self._alter_config_map("group_configs", req.group, req.configs, GROUP_PROPERTIES, refusal,
                                            False, req.validate_only)

    async def _alter_config_map(self, field: str, owner: str, changes: dict[str, str | None],
                                properties: dict[str, Property], refusal: Callable[[str], str | None],
                                replace: bool, validate_only: bool) -> ClusterDoc:
        """Sets (None: deletes) configs of one owner in a map of the cluster document (broker_configs,
        group_configs), each parsed and rendered by its property."""
        async with self._lock:
            stored: dict[str, dict[str, str]] = getattr(self.cluster, field)
            current = {} if replace else dict(stored.get(owner, {}))
            for name, value in changes.items():
                why = refusal(name)
                if why is not None:
                    raise ControllerError("invalid_config", why)
                if value is None:
                    current.pop(name, None)
                    continue
                try:
                    prop = properties[name]
                    current[name] = prop.render(prop.parse(value))
                except ConfigError as exc:
                    raise ControllerError("invalid_config", str(exc)) from None
            if validate_only:
                return self.cluster
            configs = dict(stored)
            if current:
                configs[owner] = current
            else:
                configs.pop(owner, None)
            await self._save_cluster(self.cluster.model_copy(update={field: configs}))
            self._bump()
            return self.cluster

    # -- ACLs and SCRAM credentials (ADR 0021) -------------------------------------------------

    async def create_acls(self, acls: list[AclBinding]) -> list[str | None]:
        """Adds ACLs (one already there is not added twice); per ACL, why it was refused or None."""
        errors = [validate_acl(acl) for acl in acls]
        async with self._lock:
            current = list(self.cluster.acls)
            known = set(current)
            for acl, error in zip(acls, errors, strict=True):
                if error is None and acl not in known:
                    current.append(acl)
                    known.add(acl)
            if len(current) != len(self.cluster.acls):
                await self._save_cluster(self.cluster.model_copy(update={"acls": current}))
                self._bump()
        return errors

    async def delete_acls(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        async with self._lock:
            matched = [[acl for acl in self.cluster.acls if f.matches(acl)] for f in filters]
            gone = {acl for group in matched for acl in group}
            if gone:
                kept = [acl for acl in self.cluster.acls if acl not in gone]
                await self._save_cluster(self.cluster.model_copy(update={"acls": kept}))
                self._bump()
        return matched

    async def alter_scram(self, alterations: list[ScramAlteration]) -> list[ScramResult]:
        """KIP-554's checks and answers; every valid alteration of the request is applied together."""
        seen: dict[tuple[str, str], int] = {}
        for a in alterations:
            seen[(a.user, a.mechanism)] = seen.get((a.user, a.mechanism), 0) + 1
        async with self._lock:
            scram = {user: dict(creds) for user, creds in self.cluster.scram.items()}
            results = []
            for a in alterations:
                error = self._scram_refusal(a, scram, seen)
                if error is not None:
                    results.append(ScramResult(user=a.user, error=error[0], message=error[1]))
                    continue
                if a.credential is None:
                    scram[a.user].pop(a.mechanism, None)
                    if not scram[a.user]:
                        del scram[a.user]
                else:
                    scram.setdefault(a.user, {})[a.mechanism] = a.credential
                results.append(ScramResult(user=a.user))
            if scram != self.cluster.scram:
                await self._save_cluster(self.cluster.model_copy(update={"scram": scram}))
                self._bump()
        return results

    async def alter_quotas(self, alterations: list[QuotaAlteration], validate_only: bool) -> list[QuotaResult]:
        """AlterClientQuotas: each valid entry applied (all together), each invalid one refused with
        INVALID_REQUEST and its reason, as Kafka answers."""
        async with self._lock:
            stored = {q.key: dict(q.values) for q in self.cluster.quotas}
            entities = {q.key: q.entity for q in self.cluster.quotas}
            seen: set[EntityKey] = set()
            results = []
            for a in alterations:
                reason = entity_refusal(a.entity)
                key = entity_key(dict(a.entity)) if reason is None else ()
                if reason is None and key in seen:
                    reason = f"entity {dict(a.entity)} appears more than once in the request"
                keys = [op.key for op in a.ops]
                if reason is None and len(set(keys)) != len(keys):
                    reason = "a quota appears more than once for the entity"
                if reason is None:
                    reason = next(filter(None, (value_refusal(op.key, None if op.remove else op.value)
                                                for op in a.ops)), None)
                if reason is not None:
                    results.append(QuotaResult(error="invalid_request", message=reason))
                    continue
                seen.add(key)
                values = stored.setdefault(key, {})
                entities[key] = dict(a.entity)
                for op in a.ops:
                    if op.remove:
                        values.pop(op.key, None)
                    else:
                        values[op.key] = op.value
                results.append(QuotaResult())
            quotas = [ClientQuota(entity=entities[k], values=v) for k, v in sorted(stored.items(), key=str) if v]
            if not validate_only and quotas != self.cluster.quotas:
                await self._save_cluster(self.cluster.model_copy(update={"quotas": quotas}))
                self._bump()
        return results

    @staticmethod
    def _scram_refusal(a: ScramAlteration, scram: dict, seen: dict) -> tuple[str, str] | None:
        if not a.user:
            return "unacceptable_credential", "the user name is empty"
        if a.mechanism not in SCRAM_MECHANISMS:
            return "unsupported_sasl_mechanism", f"unknown SCRAM mechanism {a.mechanism!r}"
        if seen[(a.user, a.mechanism)] > 1:
            return "duplicate_resource", f"{a.user} {a.mechanism} appears more than once in the request"
        if a.credential is None:
            if a.mechanism not in scram.get(a.user, {}):
                return "resource_not_found", f"{a.user} has no {a.mechanism} credential"
            return None
        if not SCRAM_MIN_ITERATIONS <= a.credential.iterations <= SCRAM_MAX_ITERATIONS:
            return ("unacceptable_credential", f"iterations must be between {SCRAM_MIN_ITERATIONS} and "
                                               f"{SCRAM_MAX_ITERATIONS}, got {a.credential.iterations}")
        return None

    # -- topics ----------------------------------------------------------------------------

    async def _save(self, doc: TopicDoc) -> TopicDoc:
        """Persists one topic document, then makes it the controller's state."""
        current = self.topics.get(doc.name)
        try:
            saved = await self.store.save_topic(doc, current.version if current else -1)
        except ConflictError:
            await self._adopt_stored_topic(doc.name)
            raise
        self.topics[doc.name] = saved
        return saved

    async def _adopt_stored_topic(self, name: str) -> None:
        """Someone else changed a stored document: another controller instance for a moment (an
        operator pod force-deleted keeps running for its last seconds while its successor loads).
        The change failed, as it must; the stored document becomes ours, so the next change is made
        from it instead of failing the same way until a restart."""
        try:
            stored = await self.store.load_topic(name)
        except Exception as exc:  # the store unavailable: the next conflict tries again
            log.warning("topic %s changed under this controller; reloading it failed: %s", name, exc)
            return
        if stored is None:
            return  # gone from the store: deleting it is for the deletion path, not for a conflict
        ours = self.topics.get(name)
        log.warning("topic %s was changed by another controller (stored version %d, ours %s): continuing "
                    "from the stored document", name, stored.version, ours.version if ours else None)
        self.topics[name] = stored
        self._bump()

    async def _save_cluster(self, doc: ClusterDoc) -> ClusterDoc:
        """Persists the cluster document; after a conflict the stored one becomes ours (as topics)."""
        if not self.established:
            raise ControllerError("not_controller", "the cluster has no identity yet: no broker has registered")
        try:
            self.cluster = await self.store.save_cluster(doc, self.cluster.version)
        except ConflictError:
            ours = self.cluster.version
            stored = await self.store.load_cluster()
            if stored is None:
                raise
            self.cluster = stored
            log.warning("the cluster document was changed by another controller (stored version %d, ours %d): "
                        "continuing from the stored document", self.cluster.version, ours)
            self._bump()
            raise
        return self.cluster

    async def _save_all(self, docs: list[TopicDoc]) -> None:
        """Several documents at once (a fence touches every topic the broker led); each one is
        visible once its own save succeeded, and the first failure is raised after all finished."""
        results = await asyncio.gather(*(self._save(d) for d in docs), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]

    def _placement(self, count: int, rf: int, first: int = 0) -> list[list[int]]:
        brokers = [(b.node_id, b.rack) for b in self.live_brokers()]
        try:
            return assign(brokers, count, rf, first_partition=first)
        except PlacementError as exc:
            raise ControllerError("invalid_replication_factor", str(exc)) from None

    async def create_topic(self, req: CreateTopicRequest) -> TopicDoc:
        async with self._lock:
            return await self._create_topic(req)

    async def _create_topic(self, req: CreateTopicRequest) -> TopicDoc:
        if self.in_recovery_window() and not req.validate_only:
            raise ControllerError("not_controller", "the controller is recovering the cluster's topics from what its "
                                                    "brokers hold; retry once they have registered")
        try:
            validate_topic_name(req.name)
        except InvalidTopicError as exc:
            raise ControllerError("invalid_topic_exception", str(exc)) from None
        if req.name in self.topics:
            raise ControllerError("topic_already_exists", f"topic {req.name!r} already exists")
        folded = req.name.replace(".", "_")
        clash = next((t for t in self.topics if t.replace(".", "_") == folded), None)
        if clash is not None:
            # Kafka refuses these too: metric names fold '.' into '_', so the two would share them.
            raise ControllerError("invalid_topic_exception", f"topic {req.name!r} collides with existing topic "
                                                             f"{clash!r} ('.' and '_' are the same in metric names)")
        if req.name.startswith("__") and not req.internal:
            raise ControllerError("invalid_request", f"{req.name} is reserved for internal topics")
        try:
            configs = validate_topic_configs(req.configs)
        except ConfigError as exc:
            raise ControllerError("invalid_config", str(exc)) from None
        if req.assignments:
            known = set(self.brokers)
            for i, replicas in enumerate(req.assignments):
                if not replicas or len(set(replicas)) != len(replicas) or set(replicas) - known:
                    raise ControllerError("invalid_replica_assignment", f"partition {i}: invalid brokers {replicas}")
            assignment = req.assignments
        else:
            if not 1 <= req.partitions <= MAX_PARTITIONS:
                raise ControllerError("invalid_partitions", f"partitions must be 1..{MAX_PARTITIONS}")
            assignment = self._placement(req.partitions, req.replication_factor)
        live = self._live_ids()
        partitions = []
        for replicas in assignment:
            isr = [r for r in replicas if r in live] or replicas[:1]
            leader = next((r for r in replicas if r in live), NO_LEADER)
            partitions.append(PartitionState(replicas=replicas, leader=leader, isr=isr))
        doc = TopicDoc(name=req.name, configs=configs, partitions=partitions)
        self._check_fits(doc)
        if req.validate_only:
            return doc
        saved = await self._save(doc)
        log.info("created topic %s: %d partitions, replicas %s", req.name, len(partitions), assignment)
        self._bump()
        return saved

    async def delete_topic(self, name: str) -> TopicDoc:
        async with self._lock:
            doc = self.topics.get(name)
            if doc is None:
                raise ControllerError("unknown_topic_or_partition", f"topic {name!r} does not exist")
            if name.startswith("__"):
                raise ControllerError("invalid_request", f"{name} is an internal topic and cannot be deleted")
            # The tombstone first: it is what allows brokers to delete the topic's logs. A crash
            # between the two saves leaves the topic in place (brokers keep logs of a topic that exists).
            tombstones = [*self.cluster.deleted_topics, DeletedTopic(topic_id=doc.topic_id, name=name)]
            await self._save_cluster(self.cluster.model_copy(update={"deleted_topics": tombstones[-TOMBSTONES_KEPT:]}))
            try:
                await self.store.delete_topic(name, doc.version)
            except ConflictError:
                await self._adopt_stored_topic(name)
                raise
            del self.topics[name]
            log.info("deleted topic %s", name)
            self._bump()
            return doc

    async def create_partitions(self, name: str, req: CreatePartitionsRequest) -> TopicDoc:
        async with self._lock:
            doc = self.topics.get(name)
            if doc is None:
                raise ControllerError("unknown_topic_or_partition", f"topic {name!r} does not exist")
            if name.startswith("__"):
                raise ControllerError("invalid_request", f"{name} is internal; its partition count is fixed")
            current = len(doc.partitions)
            if req.count <= current:
                raise ControllerError("invalid_partitions", f"topic {name!r} has {current} partitions; the count can "
                                                            f"only grow (asked {req.count})")
            if req.count > MAX_PARTITIONS:
                raise ControllerError("invalid_partitions", f"at most {MAX_PARTITIONS} partitions")
            rf = len(doc.partitions[0].replicas)
            assignment = req.assignments or self._placement(req.count - current, rf, first=current)
            if len(assignment) != req.count - current:
                raise ControllerError("invalid_replica_assignment", "one assignment per new partition is needed")
            live = self._live_ids()
            added = [PartitionState(replicas=r, leader=next((x for x in r if x in live), NO_LEADER),
                                    isr=[x for x in r if x in live] or r[:1]) for r in assignment]
            grown = doc.model_copy(update={"partitions": doc.partitions + added})
            self._check_fits(grown)
            if req.validate_only:
                return doc
            saved = await self._save(grown)
            self._bump()
            return saved

    def _check_fits(self, doc: TopicDoc) -> None:
        refusal = self.store.refusal(doc)
        if refusal is not None:
            raise ControllerError("invalid_partitions", refusal)
        # Each broker must have descriptors for the replicas it would host (a topic created past that
        # filled a broker's open-file limit: its rolls, new logs and connections all failed).
        before = self.topics.get(doc.name)
        old = Counter(r for p in before.partitions for r in p.replicas) if before is not None else Counter()
        new = Counter(r for p in doc.partitions for r in p.replicas)
        added = {node: count - old[node] for node, count in new.items() if count > old[node]}
        growth = len(doc.partitions) - (len(before.partitions) if before is not None else 0)
        if not self._surely_fits(added, growth):
            hosted = self._hosted_replicas(leaving_out=doc.name)
            hosted.update(old)
            self._refuse_past_capacity(hosted, added)

    async def alter_configs(self, name: str, configs: dict[str, str], validate_only: bool = False) -> TopicDoc:
        async with self._lock:
            doc = self.topics.get(name)
            if doc is None:
                raise ControllerError("unknown_topic_or_partition", f"topic {name!r} does not exist")
            try:
                normalised = validate_topic_configs(configs)
            except ConfigError as exc:
                raise ControllerError("invalid_config", str(exc)) from None
            if validate_only:
                return doc
            saved = await self._save(doc.model_copy(update={"configs": normalised}))
            self._bump()
            return saved

    async def allocate_producer_ids(self) -> ProducerIdBlock:
        async with self._lock:
            first = self.cluster.next_producer_id
            await self._save_cluster(self.cluster.model_copy(update={"next_producer_id": first + PRODUCER_ID_BLOCK}))
            return ProducerIdBlock(first=first, size=PRODUCER_ID_BLOCK)

    async def _ensure_internal_topics(self) -> None:
        if self.internal_topic_setup is None:
            return
        req = self.internal_topic_setup()
        if req is None or req.name in self.topics or self.in_recovery_window():
            return  # recovering: a broker still to report may hold it
        req = req.model_copy(update={"replication_factor": min(req.replication_factor, len(self.live_brokers()))})
        try:
            await self._create_topic(req)
        except ControllerError as exc:  # a registration must not fail for it: the topic is asked for again later
            log.error("cannot create %s: %s", req.name, exc.message)
