"""Prometheus metrics of one broker (its own registry, served on the HTTP side port)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class _LogCollector(Collector):
    """Reads offsets and sizes from the logs at scrape time instead of on every append."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[GaugeMetricFamily]:
        end = GaugeMetricFamily("dm_log_end_offset", "Log end offset", labels=["topic", "partition"])
        start = GaugeMetricFamily("dm_log_start_offset", "Log start offset", labels=["topic", "partition"])
        hw = GaugeMetricFamily("dm_high_watermark", "High watermark", labels=["topic", "partition"])
        size = GaugeMetricFamily("dm_log_size_bytes", "Bytes on disk", labels=["topic", "partition"])
        unstable = GaugeMetricFamily("dm_unstable_offsets", "High watermark minus last stable offset: offsets "
                                     "read_committed consumers wait for (open transactions), partitions led here",
                                     labels=["topic", "partition"])
        for (topic, index), part in list(self.broker.partitions.items()):
            labels = [topic, str(index)]
            end.add_metric(labels, part.log.log_end_offset)
            start.add_metric(labels, part.log.log_start_offset)
            hw.add_metric(labels, part.high_watermark)
            size.add_metric(labels, part.log.size_bytes)
            if part.is_leader:
                unstable.add_metric(labels, part.high_watermark - part.last_stable_offset)
        yield from (end, start, hw, size, unstable)
        yield from self._strays()
        yield from self._groups()
        yield from self._transactions()

    def _transactions(self) -> Iterator[GaugeMetricFamily]:
        coordinator = self.broker.txn_coordinator
        count = GaugeMetricFamily("dm_transactions", "Transactional ids this broker coordinates, by state",
                                  labels=["state"])
        oldest = GaugeMetricFamily("dm_transaction_oldest_open_seconds",
                                   "Age of the oldest open transaction this broker coordinates (0: none)")
        states: dict[str, int] = {}
        now = time.time() * 1000
        age = 0.0
        for meta in list(coordinator.txns.values()):
            states[meta.state.kafka_name] = states.get(meta.state.kafka_name, 0) + 1
            if meta.state.kafka_name == "Ongoing" and meta.start_ms > 0:
                age = max(age, (now - meta.start_ms) / 1000)
        for state, n in sorted(states.items()):
            count.add_metric([state], n)
        oldest.add_metric([], age)
        yield from (count, oldest)

    def _strays(self) -> Iterator[GaugeMetricFamily]:
        """Logs kept aside because no recorded decision allows deleting them (ADR 0017)."""
        found = self.broker.logs.strays()
        count = GaugeMetricFamily("dm_stray_logs", "Log directories kept aside as stray (dm strays lists them)")
        count.add_metric([], len(found))
        size = GaugeMetricFamily("dm_stray_bytes", "Bytes held by stray log directories")
        size.add_metric([], sum(n for _, _, n in found))
        yield from (count, size)

    def _groups(self) -> Iterator[GaugeMetricFamily]:
        members = GaugeMetricFamily("dm_group_members", "Members of a consumer group", labels=["group", "state"])
        lag = GaugeMetricFamily("dm_group_lag", "High watermark minus committed offset, for partitions led here",
                                labels=["group", "topic", "partition"])
        generation = GaugeMetricFamily("dm_group_generation", "Current generation of a consumer group",
                                       labels=["group"])
        leader = GaugeMetricFamily("dm_group_leader_info", "The member leading (assigning for) a consumer group",
                                   labels=["group", "member"])
        for group in list(self.broker.coordinator.groups.values()):
            members.add_metric([group.group_id, group.state.value], len(group.members))
            generation.add_metric([group.group_id], group.generation)
            if group.leader_id:
                leader.add_metric([group.group_id, group.leader_id], 1)
            for (topic, index), committed in list(group.offsets.items()):
                part = self.broker.partition(topic, index)
                if part is not None:
                    lag.add_metric([group.group_id, topic, str(index)], max(0, part.high_watermark - committed.offset))
        yield from (members, lag, generation, leader)


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
        self.closed_bad_frames = Counter("dm_connections_closed_bad_input",
                                         "Connections closed for malformed or oversized frames", registry=r)
        self.authentications = Counter("dm_authentications", "Authentications by listener, mechanism (SSL for TLS "
                                       "handshakes) and result (success, failure)",
                                       ["listener", "mechanism", "result"], registry=r)
        self.authorization_denials = Counter("dm_authorization_denials",
                                             "Requests (or parts of them) refused by the authorizer, by API",
                                             ["api"], registry=r)
        sessions = Gauge("dm_fetch_sessions", "Incremental fetch sessions (KIP-227) this broker keeps", registry=r)
        sessions.set_function(lambda: len(broker.fetch_sessions))
        session_partitions = Gauge("dm_fetch_session_partitions", "Partitions held by this broker's fetch sessions",
                                   registry=r)
        session_partitions.set_function(lambda: broker.fetch_sessions.partition_count())
        self.throttle_time = Counter("dm_throttle_time_seconds", "Time clients were throttled for exceeding a "
                                     "client quota, by quota and the user / client id it holds (empty: any)",
                                     ["quota", "user", "client_id"], registry=r)
        r.register(_LogCollector(broker))

    def forget_topic(self, topic: str) -> None:
        for metric in (self.bytes_in, self.bytes_out, self.messages_in, self.messages_out,
                       self.replication_bytes_out):
            try:
                metric.remove(topic)
            except KeyError:
                pass


LOOP_PROBE_SECONDS = 0.05
SLOW_LOOP_SECONDS = 0.5


async def watch_event_loop(metrics: BrokerMetrics) -> None:
    """Records how late a periodic timer fires. A Python broker is one event loop: anything that
    holds it (a slow handler, a GC pause, a starved CPU) delays every request at once, and this is
    where an operator sees it."""
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        await asyncio.sleep(LOOP_PROBE_SECONDS)
        lag = max(loop.time() - started - LOOP_PROBE_SECONDS, 0.0)
        metrics.event_loop_lag.observe(lag)
        if lag > SLOW_LOOP_SECONDS:
            log.warning("the event loop was blocked for %.0f ms", lag * 1000)

