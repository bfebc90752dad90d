"""Prometheus metrics of one broker (its own registry, served on the HTTP side port)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .log.free_space import floor_for
from .loop_stalls import STALL_SECONDS, StallCause, ThreadClock, stall_cause
from .protocol.request_memory import RequestMemory
from .steps import PARTITIONS_PER_STEP  # a scrape's copy of the partitions' figures, per turn of the loop

if TYPE_CHECKING:
    from .broker import Broker
    from .replication.partition import Partition

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


@dataclass(slots=True)
class _State:
    """What the broker's state metrics show, copied on the event loop: the exposition is then built
    from plain values in a worker thread, never from structures the loop is changing."""

    per_partition: bool = True  # metrics.per.partition.enabled; false: partition rows summed per topic
    # labels ((topic, partition), or (topic,) when summed per topic), end, start, high watermark, bytes,
    # unstable offsets
    partitions: list[tuple[tuple[str, ...], int, int, int, int, int | None]] = field(default_factory=list)
    strays: list[tuple[str, Path, int]] = field(default_factory=list)
    groups: list[tuple[str, str, int, int, str | None, list[tuple[tuple[str, ...], int]]]] = field(
        default_factory=list)
    txn_states: dict[str, int] = field(default_factory=dict)
    oldest_open_txn_s: float = 0.0
    fetch_sessions: int = 0
    fetch_session_partitions: int = 0
    hosted: int = 0  # partition replicas on this broker
    led: int = 0
    under_replicated: int = 0  # led here, with an ISR smaller than the replica set
    under_min_isr: int = 0  # led here, with an ISR below the topic's min.insync.replicas
    offline: int = 0  # in the cluster (this broker's metadata): partitions without a leader
    controller_silent_s: float = 0.0  # how long the controller has not answered heartbeats (0: it answers)
    log_dirs: list[tuple[str, int, int, int]] = field(default_factory=list)  # directory, free, total, floor bytes
    certificates: list[tuple[str, float]] = field(default_factory=list)  # listener, seconds until expiry


class _StateCollector(Collector):
    """Reads offsets, sizes, groups and transactions at scrape time instead of on every append."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.taken: _State | None = None  # set by the scrape, on the loop, for the collect that follows

    def snapshot(self) -> _State:
        """Copies the state in one piece (about 2 µs per partition); a scrape takes it in steps."""
        state = self._started()
        self._add_partitions(state, list(self.broker.partitions.values()))
        return self._finished(state)

    async def snapshot_in_steps(self) -> _State:
        """The same copy, on the event loop, which gets its turn every PARTITIONS_PER_STEP partitions (the
        figures of different partitions may be a few callbacks apart, as Kafka's scrapes are)."""
        state = self._started()
        parts = list(self.broker.partitions.values())
        for first in range(0, len(parts), PARTITIONS_PER_STEP):
            if first:
                await asyncio.sleep(0)
            self._add_partitions(state, parts[first:first + PARTITIONS_PER_STEP])
        return self._finished(state)

    def _started(self) -> _State:
        broker = self.broker
        state = _State(strays=broker.logs.strays(), fetch_sessions=len(broker.fetch_sessions),
                       fetch_session_partitions=broker.fetch_sessions.partition_count())
        state.per_partition = broker.dynamic("metrics.per.partition.enabled")
        return state

    @staticmethod
    def _add_partitions(state: _State, parts: list[Partition]) -> None:
        per_partition = state.per_partition
        for part in parts:
            if part.closed:  # retired since the copy began
                continue
            log_ = part.log
            state.partitions.append(((part.topic, str(part.index)) if per_partition else (part.topic,),
                                     log_.log_end_offset, log_.log_start_offset, part.high_watermark,
                                     log_.size_bytes,
                                     part.high_watermark - part.last_stable_offset if part.is_leader else None))
            if part.is_leader:
                state.led += 1
                state.under_replicated += len(part.isr) < len(part.replicas)
                state.under_min_isr += len(part.isr) < log_.settings["min.insync.replicas"]

    def _finished(self, state: _State) -> _State:
        broker = self.broker
        state.hosted = len(broker.partitions)
        md = broker.metadata
        if md is not None:
            state.offline = sum(p.leader < 0 for t in md.topics.values() for p in t.partitions)
        silent_since = broker.heartbeats_unreachable_since
        state.controller_silent_s = time.monotonic() - silent_since if silent_since is not None else 0.0
        for directory in broker.config.log_dirs:
            try:
                fs = os.statvfs(directory)
            except OSError:  # a failed or missing log directory: no figures rather than wrong ones
                continue
            total_bytes = fs.f_blocks * fs.f_frsize
            floor = floor_for(broker.dynamic("log.dir.min.free.bytes"), total_bytes)
            state.log_dirs.append((str(directory), fs.f_bavail * fs.f_frsize, total_bytes, floor))
        now_s = time.time()
        state.certificates = [(name, tls.not_after - now_s) for name, tls in broker.security.tls.items()
                              if tls.not_after is not None]
        for group in broker.coordinator.groups.values():
            lags = []
            for (topic, index), committed in group.offsets.items():
                part = broker.partition(topic, index)
                if part is not None:
                    lags.append(((topic, str(index)) if state.per_partition else (topic,),
                                 max(0, part.high_watermark - committed.offset)))
            cg = group.consumer  # a KIP-848 group: its members, and its epoch as the generation
            state.groups.append((group.group_id, group.state_name, len(cg.members) if cg else len(group.members),
                                 cg.group_epoch if cg else group.generation, group.leader_id or None, lags))
        now = time.time() * 1000
        for meta in broker.txn_coordinator.txns.values():
            name = meta.state.kafka_name
            state.txn_states[name] = state.txn_states.get(name, 0) + 1
            if name == "Ongoing" and meta.start_ms > 0:
                state.oldest_open_txn_s = max(state.oldest_open_txn_s, (now - meta.start_ms) / 1000)
        return state

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from self.families(self.taken or self.snapshot())

    def describe(self) -> list[GaugeMetricFamily]:
        """Every family this collector yields, without the broker's state (registration, docs/metrics.md)."""
        return list(self.families(_State()))

    def families(self, state: _State) -> Iterator[GaugeMetricFamily]:
        yield from self._logs(state)
        yield from self._strays(state)
        yield from self._groups(state)
        yield from self._transactions(state)
        yield from self._fetch_sessions(state)
        yield from self._health(state)

    @staticmethod
    def _logs(state: _State) -> Iterator[GaugeMetricFamily]:
        where = ["topic", "partition"] if state.per_partition else ["topic"]
        end = GaugeMetricFamily("dm_log_end_offset", "Log end offset", labels=where)
        start = GaugeMetricFamily("dm_log_start_offset", "Log start offset", labels=where)
        hw = GaugeMetricFamily("dm_high_watermark", "High watermark", labels=where)
        size = GaugeMetricFamily("dm_log_size_bytes", "Bytes on disk", labels=where)
        unstable = GaugeMetricFamily("dm_unstable_offsets", "High watermark minus last stable offset: offsets "
                                     "read_committed consumers wait for (open transactions), partitions led here",
                                     labels=where)
        # With metrics.per.partition.enabled=false the rows of a topic share their labels: they sum.
        sums: dict[tuple[str, ...], list[int]] = {}
        unstable_sums: dict[tuple[str, ...], int] = {}
        for labels, end_offset, start_offset, high_watermark, size_bytes, unstable_offsets in state.partitions:
            row = sums.setdefault(labels, [0, 0, 0, 0])
            row[0] += end_offset
            row[1] += start_offset
            row[2] += high_watermark
            row[3] += size_bytes
            if unstable_offsets is not None:
                unstable_sums[labels] = unstable_sums.get(labels, 0) + unstable_offsets
        for labels, (end_offset, start_offset, high_watermark, size_bytes) in sums.items():
            end.add_metric(labels, end_offset)
            start.add_metric(labels, start_offset)
            hw.add_metric(labels, high_watermark)
            size.add_metric(labels, size_bytes)
        for labels, unstable_offsets in unstable_sums.items():
            unstable.add_metric(labels, unstable_offsets)
        yield from (end, start, hw, size, unstable)

    @staticmethod
    def _transactions(state: _State) -> Iterator[GaugeMetricFamily]:
        count = GaugeMetricFamily("dm_transactions", "Transactional ids this broker coordinates, by state",
                                  labels=["state"])
        oldest = GaugeMetricFamily("dm_transaction_oldest_open_seconds",
                                   "Age of the oldest open transaction this broker coordinates (0: none)")
        for name, n in sorted(state.txn_states.items()):
            count.add_metric([name], n)
        oldest.add_metric([], state.oldest_open_txn_s)
        yield from (count, oldest)

    @staticmethod
    def _strays(state: _State) -> Iterator[GaugeMetricFamily]:
        """Logs kept aside because no recorded decision allows deleting them (ADR 0017)."""
        count = GaugeMetricFamily("dm_stray_logs", "Log directories kept aside as stray (dm strays lists them)")
        count.add_metric([], len(state.strays))
        size = GaugeMetricFamily("dm_stray_bytes", "Bytes held by stray log directories")
        size.add_metric([], sum(n for _, _, n in state.strays))
        yield from (count, size)

    @staticmethod
    def _groups(state: _State) -> Iterator[GaugeMetricFamily]:
        members = GaugeMetricFamily("dm_group_members", "Members of a consumer group", labels=["group", "state"])
        lag = GaugeMetricFamily("dm_group_lag", "High watermark minus committed offset, for partitions led here",
                                labels=["group", "topic", "partition"] if state.per_partition else ["group", "topic"])
        generation = GaugeMetricFamily("dm_group_generation",
                                       "Current generation of a consumer group (a KIP-848 group's epoch)",
                                       labels=["group"])
        leader = GaugeMetricFamily("dm_group_leader_info", "The member leading (assigning for) a consumer group",
                                   labels=["group", "member"])
        for group_id, group_state, member_count, group_generation, leader_id, lags in state.groups:
            members.add_metric([group_id, group_state], member_count)
            generation.add_metric([group_id], group_generation)
            if leader_id:
                leader.add_metric([group_id, leader_id], 1)
            lag_sums: dict[tuple[str, ...], int] = {}
            for labels, behind in lags:
                lag_sums[labels] = lag_sums.get(labels, 0) + behind
            for labels, behind in lag_sums.items():
                lag.add_metric([group_id, *labels], behind)
        yield from (members, lag, generation, leader)

    @staticmethod
    def _health(state: _State) -> Iterator[GaugeMetricFamily]:
        """What alerts are written on (deploy/prometheus): partition health, disk, certificates."""
        for name, doc, value in (
                ("dm_partitions", "Partition replicas this broker hosts", state.hosted),
                ("dm_leader_partitions", "Partitions this broker leads", state.led),
                ("dm_under_replicated_partitions", "Partitions led here whose ISR is smaller than their replica set",
                 state.under_replicated),
                ("dm_under_min_isr_partitions", "Partitions led here whose ISR is below min.insync.replicas (acks=all "
                 "writes refused)", state.under_min_isr),
                ("dm_offline_partitions", "Partitions without a leader in the cluster, as this broker's metadata "
                 "has them (every broker reports the cluster's figure)", state.offline),
                ("dm_controller_unreachable_seconds", "How long the controller has not answered this broker's "
                 "heartbeats (0: it answers)", state.controller_silent_s)):
            family = GaugeMetricFamily(name, doc)
            family.add_metric([], value)
            yield family
        free = GaugeMetricFamily("dm_log_dir_free_bytes", "Bytes free for dm on a log directory's file system",
                                 labels=["dir"])
        total = GaugeMetricFamily("dm_log_dir_total_bytes", "Size of a log directory's file system",
                                  labels=["dir"])
        floor = GaugeMetricFamily("dm_log_dir_min_free_bytes", "Free space below which produce requests to a log "
                                  "directory are refused (log.dir.min.free.bytes; 0: no floor)", labels=["dir"])
        for directory, free_bytes, total_bytes, floor_bytes in state.log_dirs:
            free.add_metric([directory], free_bytes)
            total.add_metric([directory], total_bytes)
            floor.add_metric([directory], floor_bytes)
        yield free
        yield total
        yield floor
        expiry = GaugeMetricFamily("dm_certificate_expiry_seconds", "Seconds until the certificate a TLS listener "
                                   "presents expires (negative: expired)", labels=["listener"])
        for listener, seconds in state.certificates:
            expiry.add_metric([listener], seconds)
        yield expiry

    @staticmethod
    def _fetch_sessions(state: _State) -> Iterator[GaugeMetricFamily]:
        sessions = GaugeMetricFamily("dm_fetch_sessions", "Incremental fetch sessions (KIP-227) this broker keeps")
        sessions.add_metric([], state.fetch_sessions)
        held = GaugeMetricFamily("dm_fetch_session_partitions", "Partitions held by this broker's fetch sessions")
        held.add_metric([], state.fetch_session_partitions)
        yield from (sessions, held)


class _RequestMemoryCollector(Collector):
    """The listeners' request memory (queued.max.request.bytes; Kafka's MemoryPool* figures)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        return self.families(self.broker.request_memory)

    def describe(self) -> list[GaugeMetricFamily | CounterMetricFamily]:
        """Without a broker (registration, docs/metrics.md)."""
        return list(self.families(RequestMemory(-1)))

    @staticmethod
    def families(memory: RequestMemory) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        for name, doc, value in (
                ("dm_request_memory_used_bytes", "Bytes requests reserve, received or being handled (each at the "
                 "size it declares)", memory.used),
                ("dm_request_memory_limit_bytes", "queued.max.request.bytes (-1: no limit)", memory.limit),
                ("dm_request_memory_waiting_connections", "Connections not read until request memory has room",
                 memory.waiting)):
            family = GaugeMetricFamily(name, doc)
            family.add_metric([], value)
            yield family
        depleted = CounterMetricFamily("dm_request_memory_depleted_seconds", "Time the request memory was used up "
                                       "(no connection started a request meanwhile)")
        depleted.add_metric([], memory.depleted_seconds())
        yield depleted


class BrokerMetrics:
    def __init__(self, broker: Broker) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.bytes_in = Counter("dm_bytes_in", "Record bytes produced", ["topic"], registry=r)
        self.bytes_out = Counter("dm_bytes_out", "Record bytes fetched", ["topic"], registry=r)
        self.messages_in = Counter("dm_messages_in", "Records produced", ["topic"], registry=r)
        self.messages_out = Counter("dm_messages_out", "Records fetched by consumers (whole batches sent)",
                                    ["topic"], registry=r)
        self.replication_bytes_out = Counter("dm_replication_bytes_out", "Record bytes sent to follower replicas",
                                             ["topic"], registry=r)
        self.request_latency = Histogram(
            "dm_request_duration_seconds", "Request handling time by API", ["api"], registry=r,
            buckets=LATENCY_BUCKETS,
        )
        self.request_errors = Counter("dm_request_errors", "Partition-level errors returned", ["api", "error"],
                                      registry=r)
        self.connections = Gauge("dm_active_connections", "Open Kafka connections", registry=r)
        self.connections_refused = Counter("dm_connections_refused", "Connections closed at once for "
                                           "max.connections or max.connections.per.ip", ["listener"], registry=r)
        self.event_loop_lag = Histogram(
            "dm_event_loop_lag_seconds", "How late a timer probing the event loop every 50 ms fired: time the "
            "loop (and so every request) was kept from running", registry=r, buckets=LATENCY_BUCKETS,
        )
        self.event_loop_stalls = Counter(
            "dm_event_loop_stalls", "Event-loop probes late by more than 100 ms, by cause: busy (the loop's thread "
            "on a CPU: work on the loop), run_queue (waiting for a CPU, or for the interpreter held by a thread "
            "that waited for one), other_thread (another thread of the broker on a CPU), blocked (a blocking call)",
            ["cause"], registry=r,
        )
        for cause in StallCause:
            self.event_loop_stalls.labels(cause.value)  # every cause reads 0 before its first stall
        self.closed_bad_frames = Counter("dm_connections_closed_bad_input",
                                         "Connections closed for malformed or oversized frames", registry=r)
        self.requests_refused = Counter("dm_requests_refused", "Requests refused before they were parsed, by API "
                                        "and reason (elements: over socket.request.max.elements)",
                                        ["api", "reason"], registry=r)
        self.authentications = Counter("dm_authentications", "Authentications by listener, mechanism (SSL for TLS "
                                       "handshakes) and result (success, failure)",
                                       ["listener", "mechanism", "result"], registry=r)
        self.authorization_denials = Counter("dm_authorization_denials",
                                             "Requests (or parts of them) refused by the authorizer, by API",
                                             ["api"], registry=r)
        self.throttle_time = Counter("dm_throttle_time_seconds", "Time clients were throttled for exceeding a "
                                     "client quota, by quota and the user / client id it holds (empty: any)",
                                     ["quota", "user", "client_id"], registry=r)
        self.isr_shrinks = Counter("dm_isr_shrinks", "ISR changes of partitions led here that removed replicas",
                                   registry=r)
        self.isr_expands = Counter("dm_isr_expands", "ISR changes of partitions led here that added replicas",
                                   registry=r)
        self.rest_requests = Counter("dm_rest_requests", "REST Proxy requests by route (its pattern) and HTTP status",
                                     ["route", "status"], registry=r)
        self.rest_request_latency = Histogram("dm_rest_request_duration_seconds", "REST Proxy request handling time "
                                              "by route", ["route"], registry=r, buckets=LATENCY_BUCKETS)
        self.rest_consumers = Gauge("dm_rest_consumer_instances", "REST consumer instances this broker holds",
                                    registry=r)
        # process_open_fds / process_max_fds beside the CPU and memory figures: each log segment holds
        # a descriptor, so these say how close a broker with many partitions is to its limit
        ProcessCollector(registry=r)
        self.state = _StateCollector(broker)
        r.register(self.state)
        r.register(_RequestMemoryCollector(broker))
        self._scrape_lock = asyncio.Lock()

    def count_isr_change(self, left: set[int], joined: set[int]) -> None:
        """An ISR change of a partition led here (through AlterIsr, or the controller's own)."""
        if left:
            self.isr_shrinks.inc()
        if joined:
            self.isr_expands.inc()

    async def exposition(self) -> bytes:
        """The Prometheus text of every metric: the broker's state copied on the loop, the text built
        in a worker thread (at 10,000 partitions ~50,000 samples, a quarter of a second of Python that
        would otherwise stall the loop in one piece on every scrape)."""
        async with self._scrape_lock:
            self.state.taken = await self.state.snapshot_in_steps()
            try:
                return await asyncio.to_thread(generate_latest, self.registry)
            finally:
                self.state.taken = None

    def forget_topic(self, topic: str) -> None:
        for metric in (self.bytes_in, self.bytes_out, self.messages_in, self.messages_out,
                       self.replication_bytes_out):
            try:
                metric.remove(topic)
            except KeyError:
                pass


LOOP_PROBE_SECONDS = 0.05
SLOW_LOOP_SECONDS = 0.5


async def watch_event_loop(lag_seconds: Histogram, stalls: Counter) -> None:
    """Records how late a periodic timer fires. A Python broker is one event loop: anything that
    holds it (a slow handler, a GC pause, a starved CPU) delays every request at once, and this is
    where an operator sees it."""
    loop = asyncio.get_running_loop()
    clock = ThreadClock()
    try:
        times = clock.read()
        while True:
            started = loop.time()
            await asyncio.sleep(LOOP_PROBE_SECONDS)
            lag = max(loop.time() - started - LOOP_PROBE_SECONDS, 0.0)
            now = clock.read()
            lag_seconds.observe(lag)
            if lag > STALL_SECONDS:
                spent = now.since(times)
                cause = stall_cause(lag, spent)
                stalls.labels(cause.value).inc()
                if lag > SLOW_LOOP_SECONDS:
                    log.warning("the event loop was late by %.0f ms (%s: its thread on a CPU %.0f ms, waiting for "
                                "one %.0f ms, the process's other threads on a CPU %.0f ms, waiting for one %.0f ms)",
                                lag * 1000, cause.value, spent.on_cpu * 1000, spent.run_queue * 1000,
                                (spent.process_cpu - spent.on_cpu) * 1000, spent.others_run_queue * 1000)
            times = now
    finally:
        clock.close()

