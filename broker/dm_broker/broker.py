"""Broker state: the partitions this broker hosts, driven by controller metadata.

The broker registers with the controller, heartbeats, and long-polls cluster metadata; every new
snapshot is applied to the local replicas (become leader, become follower, delete). A standalone
broker runs the same controller in-process, so there is one code path for one broker and many.
The network layer (server.py) and the protocol handlers call into this; it knows nothing of
sockets or wire formats.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from . import holdings
from .config import BROKER_PROPERTIES, GROUP_PROPERTIES, GROUP_TO_BROKER, BrokerConfig, TopicSettings
from .controller.client import ControllerClient, ControllerUnavailable
from .controller.controller import ControllerError
from .controller.models import (
    NO_LEADER,
    AlterConfigsRequest,
    BrokerConfigsRequest,
    ClusterMetadata,
    CreatePartitionsRequest,
    CreateTopicRequest,
    ElectLeadersRequest,
    GroupConfigsRequest,
    HeartbeatRequest,
    ListenerEndpoint,
    PartitionResult,
    QuotaAlteration,
    QuotaResult,
    ReassignmentRequest,
    RegisterRequest,
    ScramAlteration,
    ScramResult,
    TopicDoc,
)
from .controller_steps import asked_in_steps
from .endpoints import BrokerEndpoint, endpoint_on
from .errors import KafkaError
from .gc_tuning import LongLivedObjects
from .groups.consumer_protocol import consumer_settings
from .groups.coordinator import OFFSETS_TOPIC, CoordinatorSettings, GroupCoordinator
from .groups.share_protocol import share_settings
from .holdings import DELETE, HOST, PARTITION_METADATA, log_fate
from .log import dir_failure, meta_properties
from .log.checkpoints import read_offsets, replace_durably, write_offsets
from .log.free_space import FreeSpaceGuard
from .log.manager import LogManager
from .log.meta_properties import IdentityError
from .log.partition_log import PartitionLog
from .log.producer_state import CoordinatorFencedError, InvalidProducerEpochError
from .metrics import BrokerMetrics
from .protocol.apis import SPECS
from .protocol.channels import BrokerChannels
from .protocol.dispatch import Dispatcher
from .protocol.fetch_sessions import FetchSessionCache
from .protocol.metadata_encoder import TopicEntries
from .protocol.request_memory import RequestMemory
from .quotas.entities import entity_key
from .quotas.manager import QuotaManager
from .regexes import compile_topic_regex
from .replication.manager import ReplicaManager
from .replication.partition import LEADER, NotEnoughReplicasError, NotLeaderError, Partition
from .replication.throttle import ByteRateQuota, listed
from .security.acls import AclBinding, AclFilter
from .security.scram import ScramCredential
from .security.setup import SecuritySetup
from .share.membership import ShareMembership
from .share.partitions import SharePartitions, share_fetch_settings
from .share.state_store import STATE_TOPIC, ShareCoordinator, ShareStateClient
from .steps import PARTITIONS_PER_STEP  # changed partitions applied between two turns of the loop
from .tasks import stop_tasks
from .topic_view import TopicView
from .txn.coordinator import TXN_TOPIC, TransactionCoordinator, TxnSettings
from .txn.markers import MarkerWriter
from .txn.verification import TxnVerifier

log = logging.getLogger(__name__)
# New logs are prepared by this many I/O thread jobs at once. Without fsyncs the work is CPU (in the
# kernel, creating files): more jobs than a node's cores only take CPU from the event loop, whose
# timers then fire late (ADR 0033).
LOG_PREPARATION_JOBS = 2
# what _new_log is given: the topic, the partition, its settings, the log directory, and the first leader
# epoch where this broker leads it
NewLog = tuple[TopicDoc, int, TopicSettings, Path, int | None]
T = TypeVar("T")

TOPICS_CACHE = "topics-cache.json"
FENCED_LISTING_S = 30
SUSPICION_S = 1.0
SESSION_OPEN_WAIT_S = 5.0
HW_CHECKPOINT = "replication-offset-checkpoint"
UNREACHABLE_WARN_S = 5.0
UNREACHABLE_REPEAT_S = 30.0


class Unreachable:
    """The controller's failures are routine for a moment (a failover) and worth a warning when they
    last: said once they have lasted UNREACHABLE_WARN_S, then every UNREACHABLE_REPEAT_S."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.warned = 0.0

    def failed(self, what: str, exc: Exception) -> None:
        now = time.monotonic()
        self.since = self.since or now
        if now - self.since >= UNREACHABLE_WARN_S and now - self.warned >= UNREACHABLE_REPEAT_S:
            self.warned = now
            log.warning("the controller has not answered for %.0fs (%s: %s)", now - self.since, what, exc)
        else:
            log.debug("%s failed: %s", what, exc)

    def succeeded(self) -> None:
        if self.since is not None and self.warned:
            log.info("the controller answers again after %.0fs", time.monotonic() - self.since)
        self.since, self.warned = None, 0.0


class Broker:
    @property
    def heartbeats_unreachable_since(self) -> float | None:
        """Monotonic time since which the controller has not answered heartbeats (None: it answers)."""
        return self._heartbeats_unreachable.since

    def __init__(self, config: BrokerConfig, controller: ControllerClient) -> None:
        self.config = config
        self.node_id = config.node_id
        self.controller = controller
        self.logs = LogManager(config)
        self.partitions: dict[tuple[str, int], Partition] = {}
        # the partitions a reassignment grows (adding replicas): every heartbeat reports their lag, and
        # looking at every partition for them cost an idle broker at 10,000 partitions a seventh of its CPU
        self._growing: set[tuple[str, int]] = set()
        # Partitions are frozen out of the collector's way once hosted: at start, then after each
        # metadata step that hosts some (gc_tuning; the recovered logs are frozen by tune_gc).
        self.long_lived = LongLivedObjects(0)
        self.request_memory = RequestMemory(config["queued.max.request.bytes"])  # every listener's (ADR 0044)
        self.metrics = BrokerMetrics(self)
        self.ready = False
        self.started = False
        self.security = SecuritySetup(config, self.scram_credential)
        self.port = self.security.listeners.inter_broker_listener.port
        self.bound_ports: dict[str, int] = {}  # listener name -> port it listens on
        self.dispatcher = Dispatcher(self, SPECS)
        self.topic_view = TopicView(lambda: self.metadata, compile_topic_regex)
        self.coordinator = GroupCoordinator(self, CoordinatorSettings(
            partitions=config["offsets.topic.num.partitions"],
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            max_metadata_bytes=config["offset.metadata.max.bytes"],
            max_group_size=config["group.max.size"],
            offsets_retention_ms=int(config["offsets.retention.minutes"] * 60_000),
            retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
            consumer=consumer_settings(config),
            share=share_settings(config),
        ))
        self.share_coordinator = ShareCoordinator(self, config["share.coordinator.state.topic.num.partitions"])
        self.share = SharePartitions(share_fetch_settings(config), store=ShareStateClient(self),
                                     group_config=self.group_config)
        self.channels = BrokerChannels(self.broker_address, client_id=f"dm-broker-{self.node_id}",
                                       security=self.security.client)
        self.markers = MarkerWriter(self, self.channels)
        self.txn_coordinator = TransactionCoordinator(self, TxnSettings(
            partitions=config["transaction.state.log.num.partitions"],
            max_timeout_ms=config["transaction.max.timeout.ms"],
            id_expiration_ms=config["transactional.id.expiration.ms"],
            abort_check_interval_ms=config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
            expiration_check_interval_ms=config["transaction.remove.expired.transaction.cleanup.interval.ms"],
        ), self.markers.write)
        self.txn_verifier = TxnVerifier(self, self.channels)
        self.share_membership = ShareMembership(self.node_id, self.coordinator, self._offsets_leader, self.channels)
        self.free_space = FreeSpaceGuard(lambda: self.dynamic("log.dir.min.free.bytes"))
        self.replicas = ReplicaManager(self, config["replica.lag.time.max.ms"])
        self.metadata_entries = TopicEntries()  # encoded Metadata topic entries (protocol/metadata_encoder.py)
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"])
        self.quotas = QuotaManager(config["quota.window.num"] * config["quota.window.size.seconds"], self._throttled,
                                   request_throttle_max_s=config["quota.window.size.seconds"])
        self._rates: dict[str, int] = {}
        self.leader_quota = ByteRateQuota(lambda: self._rate("leader.replication.throttled.rate"))
        self.follower_quota = ByteRateQuota(lambda: self._rate("follower.replication.throttled.rate"))
        self.metadata: ClusterMetadata | None = None
        self.broker_epoch = -1
        self.incarnation = uuid.uuid4().hex
        self._metadata_changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._next_pid = 0
        self._pid_block_end = 0
        self._initial_hw: dict[tuple[str, int], int] = {}
        self._meta_dir = config.data_dir / "__dm_meta"
        self._cache_path = self._meta_dir / TOPICS_CACHE
        self._cache_writer = holdings.CacheWriter(self._cache_path)
        self.cluster_id_on_disk: str | None = None
        self.new_log_dirs: list[str] = []
        self.leaderless: set[tuple[str, int]] = set()  # hosted partitions without a leader (heartbeat reports)
        self._leaderless_reported: dict[tuple[str, int], tuple[int, int, int]] = {}  # as the controller heard them
        self.registered_incarnation = ""  # the controller incarnation this broker registered with
        self._register_lock = asyncio.Lock()
        # Set when this broker must stop: its data belongs to another cluster than the controller's.
        self.fatal: str | None = None
        self.fatal_event = asyncio.Event()
        self._fenced_since: dict[int, float] = {}
        self._session_open = asyncio.Event()
        self._suspected: dict[int, float] = {}  # node id -> until when its leaderships are not reported
        self._unreachable = Unreachable()
        # heartbeats on their own: metadata polls that succeed must not hide heartbeats that keep failing
        # (the broker is fenced meanwhile)
        self._heartbeats_unreachable = Unreachable()
        self.closing = False

    # -- startup and shutdown ----------------------------------------------------------------

    async def check_identity(self) -> None:
        """Before any log is touched: the directories belong to this broker (meta.properties), and
        to the cluster the controller serves; IdentityError otherwise (the broker must not start)."""
        self.cluster_id_on_disk = meta_properties.check(self.config.log_dirs, self.node_id)
        # Told to the controller at registration: replicas it was in sync for are not on a new disk (ADR 0047).
        self.new_log_dirs = [str(d) for d in meta_properties.new_directories(self.config.log_dirs)]
        while True:
            try:
                info = await self.controller.cluster_info()
                break
            except (ControllerUnavailable, ControllerError) as exc:
                log.warning("cannot ask the controller for its cluster id yet: %s", exc)
                await asyncio.sleep(0.5)
        if self.cluster_id_on_disk and info.cluster_id and info.cluster_id != self.cluster_id_on_disk:
            raise IdentityError(f"this broker's data belongs to cluster {self.cluster_id_on_disk} (meta.properties in "
                                f"{self.config.log_dirs[0]}), but the controller serves cluster {info.cluster_id}: "
                                f"refusing to join (INCONSISTENT_CLUSTER_ID); no file was changed")

    def recover_logs(self) -> None:
        """Recovers every partition directory (blocking; before the broker listens)."""
        cached = holdings.read_cache(self._cache_path)
        self.logs.open_all(lambda name: TopicSettings(self.config, cached[name].configs if name in cached else {}))
        self._initial_hw = read_offsets(self.config.data_dir / HW_CHECKPOINT)

    async def start(self) -> None:
        """Registers with the controller and applies the first metadata snapshot."""
        await self._register()
        metadata = await self._fetch_metadata(-1, "", 0)
        while metadata.incarnation != self.registered_incarnation:  # the controller restarted meanwhile
            await self._register()
            metadata = await self._fetch_metadata(-1, "", 0)
        self.apply_metadata(metadata)
        self.long_lived.settle(len(self.partitions))  # the recovered logs' partitions, out of the collector's way
        self._tasks = [asyncio.create_task(self._heartbeat_loop()), asyncio.create_task(self._metadata_loop()),
                       asyncio.create_task(self._checkpoint_loop()), asyncio.create_task(self._session_loop())]
        # Until the session is open the controller learns of this process's death only from the
        # session timeout: ready means it would learn at once.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._session_open.wait(), SESSION_OPEN_WAIT_S)
        if not self._session_open.is_set():
            log.warning("no controller session after %.0fs; serving, fenced only by the session timeout if "
                        "this process dies before it opens", SESSION_OPEN_WAIT_S)
        self.replicas.start()
        self.coordinator.start()
        self._tasks.append(asyncio.create_task(self.share.sweep(self._leads, self._wake_partition)))
        self.txn_coordinator.start()
        self.logs.start()
        self.started = self.ready = True
        log.info("broker %d ready: %d partitions (%d led) recovered in %.2fs, previous shutdown %s",
                 self.node_id, len(self.partitions), sum(p.role == LEADER for p in self.partitions.values()),
                 self.logs.recovery_seconds, self.logs.previous_shutdown)

    async def controlled_shutdown(self, timeout: float = 10) -> None:
        """Hands leadership to other ISR members before stopping (SIGTERM)."""
        try:
            await asyncio.wait_for(self.controller.controlled_shutdown(self.node_id, self.broker_epoch), timeout)
        except (ControllerUnavailable, ControllerError, TimeoutError) as exc:
            log.warning("controlled shutdown not acknowledged by the controller: %s", exc)
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(
                p.role == LEADER and len(p.isr) > 1 for p in self.partitions.values()):
            await self._wait_metadata(deadline - time.monotonic())

    async def close(self) -> None:
        self.ready = False
        self.closing = True
        await stop_tasks(*self._tasks)
        await self.replicas.close()
        await self.coordinator.close()
        await self.txn_coordinator.close()
        await self.channels.close()
        if self.started:  # a broker stopped during start-up knows no high watermarks to keep
            self._write_hw_checkpoint()
        await self._cache_writer.close()
        await self.logs.close()
        await self.controller.close()

    def stray_logs(self) -> list[str]:
        return [name for name, _, _ in self.logs.strays()]

    def reassignment_lag(self) -> dict[str, int]:
        """For each partition this broker leads that a reassignment grows: the bytes its slowest added
        replica still lacks (from the offset it last fetched from)."""
        lag = {}
        for key in list(self._growing):
            p = self.partitions.get(key)
            if p is None or not p.adding_replicas:
                self._growing.discard(key)  # gone from this broker, or grown
                continue
            if not p.is_leader:
                continue
            topic, index = key
            behind = [p.log.bytes_from(max(f.log_end_offset, p.log.log_start_offset))
                      for r, f in p.followers.items() if r in p.adding_replicas]
            missing = [r for r in p.adding_replicas if r not in p.followers]
            if missing:  # not fetched yet in this leader epoch: it lacks everything
                behind.append(p.log.bytes_from(p.log.log_start_offset))
            lag[f"{topic}:{index}"] = max(behind, default=0)
        return lag

    def _leaderless_changes(self) -> list[tuple[PartitionLog, tuple[int, int, int]]]:
        """The logs of leaderless partitions whose figures changed since the controller last heard them
        (usually none: without a leader nothing is copied), so a broker with thousands of offline partitions
        does not send them all with every heartbeat."""
        reported = self._leaderless_reported
        for key in [k for k in reported if k not in self.leaderless]:
            del reported[key]
        changes = []
        for key in sorted(self.leaderless):
            plog = self.logs.get(*key)
            if plog is None:
                continue
            figures = (plog.leader_epochs.latest_epoch, plog.log_end_offset, plog.log_start_offset)
            if reported.get(key) != figures:
                changes.append((plog, figures))
        return changes

    def registration(self) -> RegisterRequest:
        """What this broker tells the controller it is and holds (ADR 0017)."""
        inter = self.security.listeners.inter_broker_listener
        listeners = {li.name: ListenerEndpoint(host=li.advertised_host,
                                               port=li.advertised_port or self.bound_ports.get(li.name, li.port),
                                               security_protocol=li.security_protocol)
                     for li in self.security.listeners.listeners}
        return RegisterRequest(node_id=self.node_id, host=listeners[inter.name].host, port=listeners[inter.name].port,
                               listeners=listeners, rack=self.config["rack"] or None,
                               incarnation=self.incarnation, cluster_id=self.cluster_id_on_disk,
                               holdings=holdings.holdings(self.logs.logs),
                               topics={n: t for n, t in holdings.read_cache(self._cache_path).items() if t.topic_id},
                               producer_id_end=holdings.producer_id_end(self._meta_dir, self.logs.logs),
                               stray_logs=self.stray_logs(), new_log_dirs=self.new_log_dirs,
                               open_file_limit=self.logs.open_file_limit)

    async def _register(self) -> None:
        async with self._register_lock:
            while True:
                try:
                    resp = await self.controller.register(self.registration())
                    break
                except ControllerError as exc:
                    if exc.error == "inconsistent_cluster_id":
                        self._fail(f"the controller refused this broker: {exc.message}")
                        raise IdentityError(exc.message) from None
                    log.warning("cannot register with the controller yet: %s", exc)
                except ControllerUnavailable as exc:
                    log.warning("cannot register with the controller yet: %s", exc)
                await asyncio.sleep(0.5)
            if self.cluster_id_on_disk is None or self.new_log_dirs:
                await asyncio.to_thread(meta_properties.record, self.config.log_dirs, resp.cluster_id, self.node_id)
                self.cluster_id_on_disk = resp.cluster_id
                log.info("this broker's log directories now belong to cluster %s (meta.properties)", resp.cluster_id)
            # The controller has taken this broker out of the ISRs the new directories cannot hold: a later
            # registration (a controller restart) must not take it out of those it has rejoined since.
            self.new_log_dirs = []
            self.broker_epoch = resp.broker_epoch
            self.registered_incarnation = resp.incarnation
            self._leaderless_reported = {}  # a new registration: its report replaced what heartbeats said

    def _fail(self, reason: str) -> None:
        log.critical("%s", reason)
        self.fatal = reason
        self.fatal_event.set()

    async def _session_loop(self) -> None:
        """Holds the controller session open (its closing tells the controller this process died);
        opens it again for a new registration or a restarted controller."""
        while True:
            epoch = self.broker_epoch
            try:
                await self.controller.hold_session(self.node_id, epoch, self._session_open.set)
            except (ControllerUnavailable, ControllerError) as exc:
                log.debug("controller session: %s", exc)
            except Exception:  # the session tells the controller this process lives: never give it up
                log.exception("controller session failed unexpectedly; opening it again")
            await asyncio.sleep(0.5)

    async def _heartbeat_loop(self) -> None:
        interval = self.config["broker.heartbeat.interval.ms"] / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                leaderless = self._leaderless_changes()
                resp = await self.controller.heartbeat(HeartbeatRequest(
                    node_id=self.node_id, broker_epoch=self.broker_epoch, stray_logs=self.stray_logs(),
                    reassignment_lag=self.reassignment_lag(), tls=self.security.tls_report(),
                    leaderless_holdings=[holdings.held(plog) for plog, _ in leaderless]))
                self._leaderless_reported.update({(p.topic, p.partition): figures for p, figures in leaderless})
                self._heartbeats_unreachable.succeeded()
                if resp.reregister:
                    log.warning("the controller does not know this broker's epoch; registering again")
                    await self._register()
            except IdentityError:
                return  # the broker is stopping (fatal)
            except ControllerUnavailable as exc:
                self._heartbeats_unreachable.failed("heartbeat", exc)
            except ControllerError as exc:  # this loop must outlive any answer the controller gives
                log.warning("heartbeat refused: %s", exc.message)
            except Exception:  # and any bug: without heartbeats the broker stays fenced for good
                log.exception("heartbeat failed unexpectedly; trying again")
            except asyncio.CancelledError:
                if not self.closing:
                    # Said, not swallowed (swallowing would hang a shutdown): a broker whose heartbeats stop
                    # is fenced while the rest of it looks alive, which an e2e run once showed after an
                    # operator takeover with no line in the broker's log to say why.
                    log.error("the heartbeat loop was cancelled while the broker runs; the controller will "
                              "fence this broker")
                raise

    async def _fetch_metadata(self, version: int, incarnation: str, wait_s: float,
                              known: ClusterMetadata | None = None) -> ClusterMetadata:
        """The controller's metadata newer than `version`, whole; with `known` (the snapshot at
        `version`) asked as a delta and merged into it (ADR 0033)."""
        while True:
            try:
                md = await self.controller.metadata(version, incarnation, wait_s, delta=known is not None)
                self._unreachable.succeeded()
                if md.delta_from < 0:
                    return md
                try:
                    if known is None:
                        raise ValueError(f"a delta from version {md.delta_from} was not asked for")
                    return md.merged_into(known)
                except ValueError as exc:
                    log.warning("%s; asking for all of the metadata", exc)
                    known, version = None, -1
            except (ControllerUnavailable, ControllerError) as exc:
                self._unreachable.failed("metadata poll", exc)
                await asyncio.sleep(0.5)

    async def _metadata_loop(self) -> None:
        while True:
            known = self.metadata
            current = known is not None and known.incarnation == self.registered_incarnation
            md = await self._fetch_metadata(known.version if known else -1, known.incarnation if known else "", 10,
                                            known if current else None)
            if md.incarnation != self.registered_incarnation:
                # A controller this broker has not registered with (it restarted): it learns what this
                # broker holds first, so its metadata can name it, and only then is its word acted on.
                log.warning("metadata from controller incarnation %s, registered with %s: registering first",
                            md.incarnation[:8], self.registered_incarnation[:8])
                try:
                    await self._register()
                except IdentityError:
                    return
                continue
            if known is None or md.incarnation != known.incarnation or md.version > known.version:
                await self._prepare_new_logs(md)
                await self._apply_in_steps(md)

    async def _wait_metadata(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._metadata_changed.wait(), max(timeout, 0))

    async def _checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config["log.flush.offset.checkpoint.interval.ms"] / 1000)
            try:
                await asyncio.get_running_loop().run_in_executor(None, self._write_hw_checkpoint)
            except OSError as exc:  # the next round writes it again, unless the disk failed
                dir_failure.check(exc, self.config.data_dir)
                log.warning("cannot write the high-watermark checkpoint: %s", exc)

    def _write_hw_checkpoint(self) -> None:
        write_offsets(self.config.data_dir / HW_CHECKPOINT,
                      {key: p.high_watermark for key, p in self.partitions.items()})

    # -- metadata --------------------------------------------------------------------------

    def apply_metadata(self, md: ClusterMetadata) -> None:
        """Applies `md` in one piece (at start, before the broker serves)."""
        for _ in self._applying(md):
            pass

    async def _apply_in_steps(self, md: ClusterMetadata) -> None:
        """Applies `md` with the loop turning between steps; what a step hosted is frozen out of the
        collector's way before the next (gc_tuning), so no collection meets thousands of new partitions."""
        for _ in self._applying(md):
            self.long_lived.settle(len(self.partitions))
            await asyncio.sleep(0)
        self.long_lived.settle(len(self.partitions))

    def _applying(self, md: ClusterMetadata) -> Iterator[None]:
        """Applies `md`, pausing (a yield) after every PARTITIONS_PER_STEP partitions it changed, so the
        metadata loop lets other callbacks run. Between two steps `self.metadata` is already `md` while
        some partitions still have their former role: as when the update reaches this broker a little
        later for those (a client or follower asking meanwhile is told NOT_LEADER_OR_FOLLOWER and retries).
        Only the metadata loop applies updates, one after the other."""
        previous = {b.node_id: b for b in self.metadata.brokers} if self.metadata else {}
        now = time.monotonic()
        for b in md.brokers:
            if b.fenced:
                self._fenced_since.setdefault(b.node_id, now)
            else:
                self._fenced_since.pop(b.node_id, None)
            old = previous.get(b.node_id)
            if old is not None and (old.epoch != b.epoch or b.fenced):
                self._suspected.pop(b.node_id, None)  # the controller's word on it is newer
        before = self.metadata.topics if self.metadata is not None else {}
        self.metadata = md
        self._rates = {}
        self.security.set_acls(md.acls)
        self.quotas.update({q.key: q.values for q in md.quotas})
        hosted: set[tuple[str, int]] = set()
        leaderless: set[tuple[str, int]] = set()
        changed = 0
        for name, topic in md.topics.items():
            # A topic whose document is the one applied last time (a delta keeps those objects) changed
            # in nothing: only its partitions not yet hosted (a log that failed to open) need the work.
            unchanged = before.get(name) is topic
            settings: TopicSettings | None = None
            for index, state in enumerate(topic.partitions):
                if self.node_id not in state.replicas:
                    continue
                key = (name, index)
                hosted.add(key)
                if state.leader == NO_LEADER:
                    leaderless.add(key)
                part = self.partitions.get(key)
                if unchanged and part is not None:
                    continue
                changed += 1
                if changed % PARTITIONS_PER_STEP == 0:
                    yield  # nothing else hosts or retires partitions meanwhile: `part` still holds
                settings = settings or TopicSettings(self.config, topic.configs)
                if part is not None and part.topic_id != topic.topic_id:
                    self._retire(key, part.topic_id, md)  # another topic of that name since the last snapshot
                    part = None
                if part is None and (plog := self.logs.get(*key)) is not None and \
                        holdings.disk_topic_id(plog) not in (None, topic.topic_id):
                    self._retire_log(key, holdings.disk_topic_id(plog), md)  # an older topic's log
                part = part or self._host(topic, index, settings)
                if state.leader_epoch < part.leader_epoch:
                    # Never back to an older leader epoch: a controller that has not caught up
                    # (two of them for a moment, while an operator pod is replaced) would otherwise
                    # make this broker lead again in an epoch another broker has already ended.
                    log.warning("%s-%d: ignoring leader epoch %d from the controller, older than %d", name,
                                index, state.leader_epoch, part.leader_epoch)
                    continue
                part.log.settings = settings
                part.adding_replicas = list(state.adding_replicas)
                if part.adding_replicas:
                    self._growing.add(key)
                if state.leader == self.node_id and (part.role != LEADER or part.leader_epoch != state.leader_epoch):
                    self.replicas.stop_following(part)
                    part.become_leader(state.leader_epoch, state.partition_epoch, state.replicas, state.isr)
                    log.info("%s-%d: leader in epoch %d, ISR %s", name, index, state.leader_epoch, state.isr)
                elif state.leader != self.node_id and (part.role == LEADER or part.leader_id != state.leader
                                                       or part.leader_epoch != state.leader_epoch):
                    part.become_follower(state.leader, state.leader_epoch, state.partition_epoch, state.replicas,
                                         state.isr)
                    if state.leader != NO_LEADER:
                        self.replicas.follow(part, state.leader)
                    else:
                        self.replicas.stop_following(part)
                else:  # same leader, same epoch: the replicas or the ISR changed (never to an older state)
                    part.set_replicas(state.replicas)
                    part.update_isr(state.isr, state.partition_epoch)
        self.leaderless = leaderless
        for key in [k for k in self.partitions if k not in hosted]:
            self._retire(key, self.partitions[key].topic_id, md)
        for key in [k for k in self.logs.logs if k not in self.partitions]:  # on disk, hosted by no one
            self._retire_log(key, holdings.disk_topic_id(self.logs.logs[key]), md)
        self.logs.settle()
        self._sync_coordinator(md)
        deleted = {name for name, topic in before.items()
                   if (now_there := md.topics.get(name)) is None or now_there.topic_id != topic.topic_id}
        if deleted:
            self.coordinator.forget_topics(deleted)
        self._cache_writer.update(md)
        self._metadata_changed.set()
        self._metadata_changed = asyncio.Event()

    async def _prepare_new_logs(self, md: ClusterMetadata) -> None:
        """The logs of partitions `md` newly gives this broker, created in the I/O threads side by side
        before `md` is applied: each a directory, its topic id and, where this broker leads, its first
        leader epoch, without fsyncs (ADR 0033). Done one by one on the event loop, with fsyncs, 3,000
        new partitions held it for seconds (issue 31); one thread job per log woke the loop once per
        log, so the logs are split into LOG_PREPARATION_JOBS jobs. A log that fails here is created (and
        fails) as before, in apply_metadata."""
        before = self.metadata.topics if self.metadata is not None else {}
        new = [(topic, index, state) for name, topic in md.topics.items() if before.get(name) is not topic
               for index, state in enumerate(topic.partitions)
               if self.node_id in state.replicas and (name, index) not in self.partitions
               and self.logs.get(name, index) is None]
        if not new:
            return
        self.logs.settle()  # a removed log's recovery point must not be lent to a new log of its name
        places = self.logs.place([(topic.name, index) for topic, index, _ in new])
        topics = {topic.name: topic for topic, _, _ in new}  # one TopicSettings per topic, not per partition
        settings = {name: TopicSettings(self.config, topic.configs) for name, topic in topics.items()}
        jobs = [[(topic, index, settings[topic.name], places[(topic.name, index)],
                  state.leader_epoch if state.leader == self.node_id else None) for topic, index, state in part]
                for part in (new[i::LOG_PREPARATION_JOBS] for i in range(LOG_PREPARATION_JOBS)) if part]
        loop = asyncio.get_running_loop()
        for results in await asyncio.gather(*(loop.run_in_executor(None, self._new_logs, job) for job in jobs)):
            for (topic, index, *_), plog in results:
                if isinstance(plog, BaseException):
                    dir_failure.check(plog)
                    log.warning("%s-%d: preparing its log failed (%s); trying again on the event loop", topic.name,
                                index, plog)
                else:
                    self.logs.adopt(plog)  # nothing else creates logs while a metadata update is being applied

    @classmethod
    def _new_logs(cls, job: list[NewLog]) -> list[tuple[NewLog, PartitionLog | Exception]]:
        results: list[tuple[NewLog, PartitionLog | Exception]] = []
        for item in job:
            try:
                results.append((item, cls._new_log(*item)))
            except Exception as exc:  # this log is tried again on the loop; the others go on
                results.append((item, exc))
        return results

    @staticmethod
    def _new_log(topic: TopicDoc, index: int, settings: TopicSettings, directory: Path,
                 leader_epoch: int | None) -> PartitionLog:
        # Nothing here is fsynced: a new log holds no record yet, and its first flush makes the directory,
        # its topic id and its first epoch durable before any record (ADR 0033). Until then a power loss
        # can only take the empty log, which the broker creates again.
        plog = LogManager.prepare(topic.name, index, settings, directory)
        plog.write_unsynced(PARTITION_METADATA, topic.topic_id.encode())
        plog.written_topic_id = topic.topic_id
        if leader_epoch is not None:  # become_leader finds it assigned and writes nothing
            plog.leader_epochs.assign(leader_epoch, plog.log_end_offset, durable=False)
        return plog

    def _host(self, topic: TopicDoc, index: int, settings: TopicSettings) -> Partition:
        key = (topic.name, index)
        plog = self.logs.get(*key)
        if plog is None:
            plog = self.logs.create(topic.name, index, settings)  # on the log dir holding fewest partitions
        marker = plog.directory / PARTITION_METADATA
        if plog.written_topic_id is None and not marker.exists():
            replace_durably(marker, topic.topic_id.encode())  # into the log's directory, made when it opened
            plog.written_topic_id = topic.topic_id
        part = Partition(topic.name, index, plog, self.node_id, topic_id=topic.topic_id,
                         on_isr_change=self.metrics.count_isr_change)
        part.hw = min(self._initial_hw.get(key, 0), plog.log_end_offset)
        self.partitions[key] = part
        return part

    def _retire(self, key: tuple[str, int], topic_id: str | None, md: ClusterMetadata) -> None:
        """Stops hosting a partition the metadata no longer gives this broker; its log is deleted or
        kept aside as the controller's recorded decisions say (holdings.log_fate)."""
        part = self.partitions.pop(key)
        self.replicas.stop_following(part)
        part.close()
        if key[0] == OFFSETS_TOPIC:
            self.coordinator.unload(key[1])
        if key[0] == TXN_TOPIC:
            self.txn_coordinator.unload(key[1])
        if key[0] == STATE_TOPIC:
            self.share_coordinator.unload(key[1])
        if key[0] not in md.topics:
            self.metrics.forget_topic(key[0])
        self._retire_log(key, topic_id, md)

    def _retire_log(self, key: tuple[str, int], topic_id: str | None, md: ClusterMetadata) -> None:
        fate = log_fate(topic_id, key[1], md.topics.get(key[0]), self.node_id, holdings.tombstones(md))
        if fate == HOST:
            return
        if fate == DELETE:
            self.logs.delete_partition(*key)
            reason = "topic deleted" if key[0] not in md.topics or md.topics[key[0]].topic_id != topic_id \
                else "no longer a replica here"
            log.info("%s-%d: %s; log removed", *key, reason)
            return
        where = self.logs.set_aside(*key, topic_id)
        if where is not None:
            log.warning("%s-%d (topic id %s): the metadata does not name it and no recorded decision allows deleting "
                        "it; kept aside as %s (dm strays lists and deletes such logs)", *key, topic_id, where)

    def _sync_coordinator(self, md: ClusterMetadata) -> None:
        """The group and transaction coordinators serve the partitions of their topics led here."""
        topic = md.topics.get(OFFSETS_TOPIC)
        if topic is not None:
            self.coordinator.settings.partitions = len(topic.partitions)
            for index in range(len(topic.partitions)):
                part = self.partitions.get((OFFSETS_TOPIC, index))
                leads = part is not None and part.role == LEADER
                if leads and index not in self.coordinator.owned:
                    self.coordinator.load(index)
                elif not leads and index in self.coordinator.owned:
                    self.coordinator.unload(index)
        topic = md.topics.get(TXN_TOPIC)
        if topic is not None:
            self.txn_coordinator.settings.partitions = len(topic.partitions)
            for index in range(len(topic.partitions)):
                part = self.partitions.get((TXN_TOPIC, index))
                if part is not None and part.role == LEADER:
                    # The coordinator epoch is the partition's leader epoch: a marker from an older
                    # coordinator of the transaction is refused by the partitions.
                    self.txn_coordinator.load(index, part.leader_epoch)
                elif index in self.txn_coordinator.owned:
                    self.txn_coordinator.unload(index)
        topic = md.topics.get(STATE_TOPIC)
        if topic is not None:
            self.share_coordinator.partitions = len(topic.partitions)
            for index in range(len(topic.partitions)):
                part = self.partitions.get((STATE_TOPIC, index))
                if part is not None and part.role == LEADER:
                    self.share_coordinator.load(index)
                elif index in self.share_coordinator.snapshots:
                    self.share_coordinator.unload(index)

    # -- views -----------------------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self.metadata.cluster_id if self.metadata else ""

    @property
    def controller_id(self) -> int:
        """What Metadata reports as the controller. A separate controller process is not a Kafka
        broker, so clients are given the lowest live broker (they only use it for admin requests,
        which every dm broker forwards)."""
        if self.metadata is None:
            return -1
        if self.metadata.controller_id >= 0:
            return self.metadata.controller_id
        return min((b.node_id for b in self.metadata.brokers if not b.fenced), default=-1)

    def _leads(self, topic: str, index: int) -> bool:
        part = self.partition(topic, index)
        return part is not None and part.is_leader

    def _wake_partition(self, topic: str, index: int) -> None:
        part = self.partition(topic, index)
        if part is not None:
            part.notify_changed()

    def topic(self, name: str) -> TopicDoc | None:
        return self.metadata.topics.get(name) if self.metadata else None

    def topics(self) -> dict[str, TopicDoc]:
        return self.metadata.topics if self.metadata else {}

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicDoc | None:
        return self.topic_view.by_id(str(topic_id))  # Fetch asks per topic: an index, not a scan

    def topic_settings(self, name: str) -> TopicSettings | None:
        topic = self.topic(name)
        return None if topic is None else TopicSettings(self.config, topic.configs)

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        if self.metadata is None:
            return None
        return self.metadata.scram.get(user, {}).get(mechanism)

    def endpoints(self, listener: str | None = None) -> list[BrokerEndpoint]:
        """Brokers serving now: registered and not fenced; with `listener`, their endpoints on that
        listener (brokers without it are left out, as Kafka does), otherwise the inter-broker ones."""
        if not self.metadata:
            return []
        found = (endpoint_on(b, listener) for b in self.metadata.brokers if not b.fenced)
        return [e for e in found if e is not None]

    def listed_endpoints(self, listener: str | None = None) -> list[BrokerEndpoint]:
        """The broker list of Metadata responses: serving brokers, and for FENCED_LISTING_S those
        just fenced. A client (librdkafka) that sees a broker vanish in the same response that moves
        its partitions sends them through an internal no-leader state and re-queries only a second
        later; listed a little longer, the partitions move in one step."""
        if not self.metadata:
            return []
        now = time.monotonic()
        found = (endpoint_on(b, listener) for b in self.metadata.brokers
                 if not b.fenced or now - self._fenced_since.get(b.node_id, now) < FENCED_LISTING_S)
        return [e for e in found if e is not None]

    def suspect(self, node_id: int) -> None:
        """This broker's replication connection to `node_id` failed: its process may have died, and
        the controller's verdict is tens of milliseconds away. Until it arrives (or the connection
        is back, or SUSPICION_S pass), Metadata requests about its partitions wait for it instead of
        answering with a leader that is probably dead: a client told the dead leader would only
        ask again at its next periodic refresh (a second for librdkafka)."""
        if node_id != self.node_id:
            self._suspected[node_id] = time.monotonic() + SUSPICION_S

    def trust(self, node_id: int) -> None:
        self._suspected.pop(node_id, None)

    def suspected(self, node_id: int) -> bool:
        return self._suspected.get(node_id, 0) > time.monotonic()

    async def wait_for_verdict(self, leaders: set[int], timeout: float) -> None:
        """Waits (bounded) until none of `leaders` is suspected any more."""
        deadline = time.monotonic() + timeout
        while any(self.suspected(n) for n in leaders) and time.monotonic() < deadline:
            await self._wait_metadata(min(deadline, min(self._suspected.get(n, 0) for n in leaders)) -
                                      time.monotonic())

    def broker_address(self, node_id: int) -> tuple[str, int] | None:
        endpoint = self.endpoint(node_id)
        return None if endpoint is None else (endpoint.host, endpoint.port)

    def endpoint(self, node_id: int) -> BrokerEndpoint | None:
        if not self.metadata:
            return None
        b = next((b for b in self.metadata.brokers if b.node_id == node_id), None)
        return None if b is None else BrokerEndpoint(b.node_id, b.host, b.port, b.rack)

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def missing_partition_error(self, topic: str, index: int) -> ErrorCode:
        """Why a partition is not served here: it does not exist, or another broker has it."""
        doc = self.topic(topic)
        if doc is None or not 0 <= index < len(doc.partitions):
            return ErrorCode.unknown_topic_or_partition
        return ErrorCode.not_leader_or_follower

    # -- topic administration (through the controller) ---------------------------------------

    async def _until_visible(self, predicate, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while not predicate() and time.monotonic() < deadline:
            await self._wait_metadata(deadline - time.monotonic())

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: dict[str, str | None], validate_only: bool = False,
                           assignments: list[list[int]] | None = None, internal: bool = False) -> TopicDoc:
        if partitions == -1:
            partitions = self.config["num.partitions"]
        if replication_factor == -1:
            replication_factor = self.config["default.replication.factor"]
        if any(v is None for v in configs.values()):
            raise KafkaError(ErrorCode.invalid_config, "topic configs need values")
        req = CreateTopicRequest(name=name, partitions=partitions, replication_factor=replication_factor,
                                 configs={k: v for k, v in configs.items() if v is not None},
                                 assignments=assignments, validate_only=validate_only, internal=internal)
        doc = await self._ask_controller(self.controller.create_topic(req))
        if not validate_only:
            await self._until_visible(lambda: self.topic(name) is not None)
        return doc

    async def delete_topic(self, name: str) -> TopicDoc:
        doc = await self._ask_controller(self.controller.delete_topic(name))
        await self._until_visible(lambda: self.topic(name) is None)
        return doc

    async def create_partitions(self, name: str, count: int, validate_only: bool,
                                assignments: list[list[int]] | None = None) -> None:
        req = CreatePartitionsRequest(count=count, assignments=assignments, validate_only=validate_only)
        await self._ask_controller(self.controller.create_partitions(name, req))
        if not validate_only:
            await self._until_visible(lambda: (t := self.topic(name)) is not None and len(t.partitions) >= count)

    async def alter_topic_configs(self, name: str, configs: dict[str, str], validate_only: bool = False) -> None:
        req = AlterConfigsRequest(configs=configs, validate_only=validate_only)
        doc = await self._ask_controller(self.controller.alter_configs(name, req))
        if not validate_only:
            await self._until_visible(lambda: (t := self.topic(name)) is not None and t.version >= doc.version)

    # -- dynamic broker configs, reassignments, elections, records -----------------------------

    def dynamic_configs(self) -> dict[str, dict[str, str]]:
        return self.metadata.broker_configs if self.metadata else {}

    def group_configs(self, group: str) -> dict[str, str]:
        return self.metadata.group_configs.get(group, {}) if self.metadata else {}

    def group_config(self, group: str, name: str) -> Any:
        """A group config in effect: the group's own value, else the default (for the lock duration,
        the broker's group.share.record.lock.duration.ms)."""
        prop = GROUP_PROPERTIES[name]
        value = self.group_configs(group).get(name)
        if value is not None:
            return prop.parse(value)
        if name in GROUP_TO_BROKER:
            return self.config[GROUP_TO_BROKER[name]]
        return prop.default

    async def alter_group_configs(self, group: str, configs: dict[str, str | None], validate_only: bool) -> None:
        await self._ask_controller(self.controller.alter_group_configs(
            GroupConfigsRequest(group=group, configs=configs, validate_only=validate_only)))
        if not validate_only:
            await self._until_visible(lambda: all(self.group_configs(group).get(k) is not None
                                                  for k, v in configs.items() if v is not None))

    def config_levels(self, name: str) -> list[tuple[Any, str]]:
        """Where a broker property's value comes from, the value in effect first: this broker's
        dynamic config, the cluster-wide dynamic default, the static configuration, the default."""
        prop = BROKER_PROPERTIES[name]
        configs = self.dynamic_configs()
        levels = [(prop.parse(configs[key][name]), level)
                  for key, level in ((str(self.node_id), "dynamic_broker"), ("", "dynamic_default"))
                  if name in configs.get(key, {})]
        if name in self.config.explicit:
            levels.append((self.config[name], "static"))
        levels.append((prop.default, "default"))
        return levels

    def dynamic(self, name: str) -> Any:
        """A broker property's value in effect, dynamic configs included."""
        return self.config_levels(name)[0][0]

    def _rate(self, name: str) -> int:
        if name not in self._rates:
            self._rates[name] = self.dynamic(name)
        return self._rates[name]

    def leader_throttled(self, part: Partition, replica: int) -> bool:
        """Whether sending this partition to `replica` counts against leader.replication.throttled.rate."""
        return replica in part.adding_replicas or listed(
            part.log.settings["leader.replication.throttled.replicas"], part.index, replica)

    def follower_throttled(self, part: Partition) -> bool:
        return self.node_id in part.adding_replicas or listed(
            part.log.settings["follower.replication.throttled.replicas"], part.index, self.node_id)

    async def alter_broker_configs(self, broker: str, configs: dict[str, str | None], replace: bool,
                                   validate_only: bool) -> None:
        req = BrokerConfigsRequest(broker=broker, configs=configs, replace=replace, validate_only=validate_only)
        await self._ask_controller(self.controller.alter_broker_configs(req))
        if not validate_only:
            wanted = {k: v for k, v in configs.items() if v is not None}
            await self._until_visible(lambda: all(self.dynamic_configs().get(broker, {}).get(k) is not None
                                                  for k in wanted))

    async def alter_reassignments(self, requests: list[ReassignmentRequest]) -> list[PartitionResult]:
        version = self.metadata.version if self.metadata else -1
        results = await asked_in_steps(requests, self.controller.alter_reassignments, self._ask_controller)
        if any(r.error is None for r in results):  # so ListPartitionReassignments here shows them at once
            await self._until_visible(lambda: self.metadata is not None and self.metadata.version > version, 2)
        return results

    async def elect_leaders(self, unclean: bool, partitions: list[tuple[str, int]] | None) -> list[PartitionResult]:
        return await asked_in_steps(partitions, lambda part: self.controller.elect_leaders(
            ElectLeadersRequest(unclean=unclean, partitions=part)), self._ask_controller)

    def _offsets_leader(self, group_id: str) -> int:
        """The node leading the group's __consumer_offsets partition (its coordinator), or -1."""
        doc = self.topic(OFFSETS_TOPIC)
        partition = self.coordinator.partition_for(group_id)
        return doc.partitions[partition].leader if doc is not None and partition < len(doc.partitions) else -1

    def delete_records(self, topic: str, index: int, offset: int) -> int:
        """DeleteRecords on the leader: moves the log start offset (-1: to the high watermark);
        followers follow through their fetches. Returns the new log start offset."""
        part = self.partitions.get((topic, index))
        if part is None:
            raise KafkaError(self.missing_partition_error(topic, index), f"{topic}-{index} is not here")
        if not part.is_leader:
            raise KafkaError(ErrorCode.not_leader_or_follower, f"broker {self.node_id} does not lead {topic}-{index}")
        target = part.high_watermark if offset == -1 else offset
        if target < 0 or target > part.high_watermark:
            raise KafkaError(ErrorCode.offset_out_of_range, f"offset {offset} is beyond the high watermark "
                                                            f"{part.high_watermark} of {topic}-{index}")
        start = part.log.advance_start(target)
        part.notify_changed()  # fetch sessions tell followers the new log start
        log.info("%s-%d: records before %d deleted (log start %d)", topic, index, target, start)
        return start

    async def wait_low_watermark(self, topic: str, index: int, offset: int, timeout_s: float) -> int:
        """Until every live replica's log starts at `offset` or later (DeleteRecords answers then, as
        Kafka does: a follower that still held the records could lead next and bring them back).
        Returns the low watermark; raises KafkaError REQUEST_TIMED_OUT at the timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            part = self.partitions.get((topic, index))
            if part is None or not part.is_leader:
                raise KafkaError(ErrorCode.not_leader_or_follower, f"broker {self.node_id} no longer leads "
                                                                   f"{topic}-{index}")
            live = {e.node_id for e in self.endpoints()}
            low = part.low_watermark(live)
            if low >= offset:
                return low
            if time.monotonic() >= deadline:
                raise KafkaError(ErrorCode.request_timed_out, f"{topic}-{index}: the low watermark is {low}: not every "
                                                              f"live replica has moved its log start to {offset} yet")
            await asyncio.sleep(0.02)

    # -- ACLs and SCRAM credentials: kept by the controller, applied from the metadata ---------------

    async def create_acls(self, acls: list[AclBinding]) -> list[str | None]:
        errors = await self._ask_controller(self.controller.create_acls(acls))
        made = [a for a, e in zip(acls, errors, strict=True) if e is None]
        await self._until_visible(lambda: self.metadata is not None and all(a in self.metadata.acls for a in made))
        return errors

    async def delete_acls(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        deleted = await self._ask_controller(self.controller.delete_acls(filters))
        gone = {a for group in deleted for a in group}
        await self._until_visible(lambda: self.metadata is not None and not gone & set(self.metadata.acls))
        return deleted

    async def alter_scram(self, alterations: list[ScramAlteration]) -> list[ScramResult]:
        results = await self._ask_controller(self.controller.alter_scram(alterations))
        done = [a for a, r in zip(alterations, results, strict=True) if r.error is None]
        await self._until_visible(lambda: all(self.scram_credential(a.user, a.mechanism) == a.credential
                                              for a in done))
        return results

    async def alter_quotas(self, alterations: list[QuotaAlteration], validate_only: bool) -> list[QuotaResult]:
        results = await self._ask_controller(self.controller.alter_quotas(alterations, validate_only))
        done = [a for a, r in zip(alterations, results, strict=True) if r.error is None and not validate_only]

        def visible() -> bool:
            stored = {q.key: q.values for q in self.metadata.quotas} if self.metadata is not None else {}
            return all(stored.get(entity_key(dict(a.entity)), {}).get(op.key) == (None if op.remove else op.value)
                       for a in done for op in a.ops)

        await self._until_visible(visible)
        return results

    def _throttled(self, quota: str, sensor: tuple[str, str], seconds: float) -> None:
        self.metrics.throttle_time.labels(quota, *sensor).inc(seconds)

    async def _ask_controller(self, call: Awaitable[T]) -> T:
        """Runs a controller call; its errors become the Kafka error codes clients expect."""
        try:
            return await call
        except ControllerError as exc:
            try:
                code = ErrorCode[exc.error]
            except KeyError:
                code = ErrorCode.unknown_server_error
            raise KafkaError(code, exc.message) from None
        except ControllerUnavailable as exc:
            raise KafkaError(ErrorCode.not_controller, str(exc)) from None

    async def auto_create(self, name: str) -> TopicDoc | None:
        """Creates a topic on first use when auto.create.topics.enable is set."""
        if not self.config["auto.create.topics.enable"]:
            return None
        try:
            return await self.create_topic(name, -1, -1, {})
        except KafkaError as exc:
            if exc.code == ErrorCode.topic_already_exists:
                await self._until_visible(lambda: self.topic(name) is not None)
                return self.topic(name)
            raise

    async def ensure_offsets_topic(self) -> None:
        """__consumer_offsets is created on first use of groups, when the brokers are up."""
        if self.topic(OFFSETS_TOPIC) is not None:
            return
        configs = {"cleanup.policy": "compact", "segment.bytes": str(self.config["offsets.topic.segment.bytes"])}
        live = len(self.endpoints())
        rf = max(1, min(self.config["offsets.topic.replication.factor"], live))
        with contextlib.suppress(KafkaError):
            await self.create_topic(OFFSETS_TOPIC, self.config["offsets.topic.num.partitions"], rf, configs,
                                    internal=True)

    async def ensure_txn_topic(self) -> None:
        """__transaction_state is created on first use of transactions, when the brokers are up."""
        if self.topic(TXN_TOPIC) is not None:
            return
        live = len(self.endpoints())
        rf = max(1, min(self.config["transaction.state.log.replication.factor"], live))
        configs = {"cleanup.policy": "compact",
                   "segment.bytes": str(self.config["transaction.state.log.segment.bytes"]),
                   "min.insync.replicas": str(min(self.config["transaction.state.log.min.isr"], rf)),
                   "unclean.leader.election.enable": "false"}
        with contextlib.suppress(KafkaError):
            await self.create_topic(TXN_TOPIC, self.config["transaction.state.log.num.partitions"], rf, configs,
                                    internal=True)

    async def ensure_share_state_topic(self) -> None:
        """__share_group_state is created on first use of share groups, when the brokers are up."""
        if self.topic(STATE_TOPIC) is not None:
            return
        live = len(self.endpoints())
        rf = max(1, min(self.config["share.coordinator.state.topic.replication.factor"], live))
        configs = {"cleanup.policy": "compact",
                   "min.insync.replicas": str(min(self.config["share.coordinator.state.topic.min.isr"], rf)),
                   "unclean.leader.election.enable": "false"}
        with contextlib.suppress(KafkaError):
            await self.create_topic(STATE_TOPIC, self.config["share.coordinator.state.topic.num.partitions"], rf,
                                    configs, internal=True)

    # -- transaction markers -----------------------------------------------------------------

    async def write_marker(self, topic: str, index: int, producer_id: int, producer_epoch: int, committed: bool,
                           coordinator_epoch: int, timeout_s: float = 30) -> ErrorCode:
        """Ends a producer's transaction in a partition this broker leads (WriteTxnMarkers): the marker
        is appended and waited for as acks=all; a marker on __consumer_offsets also makes the group
        coordinator apply (or drop) the offsets committed in the transaction."""
        part = self.partitions.get((topic, index))
        if part is None:
            return self.missing_partition_error(topic, index)
        if not part.is_leader:
            return ErrorCode.not_leader_or_follower
        try:
            part.check_min_isr()
            result = await part.append_marker(producer_id, producer_epoch, committed, coordinator_epoch,
                                              int(time.time() * 1000))
        except NotEnoughReplicasError:
            return ErrorCode.not_enough_replicas
        except InvalidProducerEpochError:
            return ErrorCode.invalid_producer_epoch
        except CoordinatorFencedError:
            return ErrorCode.transaction_coordinator_fenced
        except NotLeaderError:
            return ErrorCode.not_leader_or_follower
        try:
            await part.wait_committed(result.last_offset + 1, timeout_s)
        except TimeoutError:
            return ErrorCode.request_timed_out
        except NotLeaderError:
            return ErrorCode.not_leader_or_follower
        except NotEnoughReplicasError:
            return ErrorCode.not_enough_replicas_after_append
        if topic == OFFSETS_TOPIC:
            # Only now: offsets committed in the transaction become visible once its marker is on
            # min.insync.replicas disks, never before (Kafka applies them after the acks=all append).
            # A marker that is retried after a timeout completes them then; a new leader replays it.
            self.coordinator.complete_txn(index, producer_id, committed)
        return ErrorCode.none

    # -- producer ids ----------------------------------------------------------------------

    async def allocate_producer_id(self) -> int:
        """Ids come from durable blocks handed out by the controller: never reused."""
        if self._next_pid >= self._pid_block_end:
            block = await self.controller.allocate_producer_ids()
            await asyncio.to_thread(holdings.record_producer_id_end, self._meta_dir, block.first + block.size)
            self._next_pid, self._pid_block_end = block.first, block.first + block.size
        pid = self._next_pid
        self._next_pid += 1
        return pid


async def embedded_controller(config: BrokerConfig):
    """The in-process controller of a standalone broker, stored under its data dir."""
    from .controller.controller import Controller, ControllerSettings
    from .controller.store import FileControllerStore

    store = FileControllerStore(Path(config.data_dir) / "__dm_meta" / "controller")
    controller = await Controller.open(store, expected_brokers=1, **ControllerSettings.from_config(config).model_dump())
    controller.node_id = config.node_id
    return controller

