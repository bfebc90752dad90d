"""Broker state: topics, the partitions this broker hosts, and producer-id allocation.

The network layer (server.py) and the protocol handlers call into this; it knows nothing of
sockets or wire formats.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from .config import BrokerConfig, ConfigError, TopicSettings, validate_topic_configs
from .errors import KafkaError
from .groups.coordinator import OFFSETS_TOPIC, CoordinatorSettings, GroupCoordinator
from .log.manager import LogManager
from .metrics import BrokerMetrics
from .protocol.apis import SPECS
from .protocol.dispatch import Dispatcher
from .replication.partition import Partition
from .topics import INTERNAL_TOPICS, InvalidTopicError, TopicInfo, TopicStore, validate_topic_name

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK = 1000
MAX_PARTITIONS = 10_000


@dataclass(frozen=True)
class BrokerEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.store = TopicStore(config.data_dir)
        self.logs = LogManager(config)
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.metrics = BrokerMetrics(self)
        self.ready = False
        self.port = config["listener.port"]
        self.dispatcher = Dispatcher(self, SPECS)
        self.coordinator = GroupCoordinator(self, CoordinatorSettings(
            partitions=config["offsets.topic.num.partitions"],
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            max_metadata_bytes=config["offset.metadata.max.bytes"],
            max_group_size=config["group.max.size"],
        ))
        self._next_pid = 0
        self._pid_block_end = 0

    @property
    def cluster_id(self) -> str:
        return self.store.cluster_id

    @property
    def controller_id(self) -> int:
        return self.node_id  # a standalone broker is its own controller

    def open(self) -> None:
        """Recovers every log (blocking) and starts background work."""
        self.logs.open_all(self.topic_settings)
        self.open_recovered()

    def open_recovered(self) -> None:
        """Hosts every partition once the logs are recovered; the broker is then ready."""
        for topic in self.store.topics.values():
            self._host_partitions(topic, range(topic.partitions))
        offsets_topic = self._ensure_offsets_topic()
        # A standalone broker leads every partition, so it coordinates every group.
        for partition in range(offsets_topic.partitions):
            self.coordinator.load(partition)
        self.coordinator.settings.partitions = offsets_topic.partitions
        self.coordinator.start()
        self.logs.start()
        self.ready = True
        log.info(
            "broker %d recovered %d partitions in %.2fs (previous shutdown %s)",
            self.node_id, len(self.partitions), self.logs.recovery_seconds,
            "clean" if self.logs.was_clean_shutdown else "unclean",
        )

    async def close(self) -> None:
        self.ready = False
        await self.coordinator.close()
        await self.logs.close()

    def _ensure_offsets_topic(self) -> TopicInfo:
        existing = self.store.get(OFFSETS_TOPIC)
        if existing is not None:
            return existing
        rf = min(self.config["offsets.topic.replication.factor"], len(self.endpoints()))
        configs = {"cleanup.policy": "compact", "segment.bytes": str(self.config["offsets.topic.segment.bytes"])}
        return self.create_topic(OFFSETS_TOPIC, self.config["offsets.topic.num.partitions"], rf, configs,
                                 internal=True)

    # -- topics ----------------------------------------------------------------------------

    def topic_settings(self, name: str) -> TopicSettings | None:
        topic = self.store.get(name)
        return None if topic is None else TopicSettings(self.config, topic.configs)

    def endpoints(self) -> list[BrokerEndpoint]:
        rack = self.config["rack"] or None
        port = self.config["advertised.port"] or self.port
        return [BrokerEndpoint(self.node_id, self.config.advertised_host, port, rack)]

    def _host_partitions(self, topic: TopicInfo, indexes: range) -> None:
        settings = TopicSettings(self.config, topic.configs)
        for i in indexes:
            plog = self.logs.create(topic.name, i, settings)
            self.partitions[(topic.name, i)] = Partition(
                topic.name, i, plog, self.node_id, 0, [self.node_id], [self.node_id]
            )

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str | None],
        validate_only: bool = False, internal: bool = False,
    ) -> TopicInfo:
        try:
            validate_topic_name(name)
        except InvalidTopicError as exc:
            raise KafkaError(ErrorCode.invalid_topic_exception, str(exc)) from None
        if name in INTERNAL_TOPICS and not internal and self.store.get(name) is None:
            raise KafkaError(ErrorCode.invalid_request, f"{name} is an internal topic managed by dm")
        if self.store.get(name) is not None:
            raise KafkaError(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
        if partitions == -1:
            partitions = self.config["num.partitions"]
        if replication_factor == -1:
            replication_factor = self.config["default.replication.factor"]
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise KafkaError(ErrorCode.invalid_partitions, f"partitions must be 1..{MAX_PARTITIONS}")
        if replication_factor < 1:
            raise KafkaError(ErrorCode.invalid_replication_factor, "replication factor must be >= 1")
        brokers = len(self.endpoints())
        if replication_factor > brokers:
            raise KafkaError(
                ErrorCode.invalid_replication_factor,
                f"replication factor {replication_factor} is larger than the {brokers} available brokers",
            )
        try:
            normalised = validate_topic_configs(configs)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
        topic = TopicInfo(name=name, partitions=partitions, replication_factor=replication_factor,
                          configs=normalised)
        if validate_only:
            return topic
        self.store.put(topic)
        self._host_partitions(topic, range(partitions))
        log.info("created topic %s with %d partitions", name, partitions)
        return topic

    def delete_topic(self, name: str) -> TopicInfo:
        topic = self.store.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        if topic.internal:
            raise KafkaError(ErrorCode.invalid_request, f"{name} is an internal topic and cannot be deleted")
        for key in [k for k in self.partitions if k[0] == name]:
            self.partitions.pop(key).close()
        self.logs.delete_topic(name)
        self.store.remove(name)
        self.metrics.forget_topic(name)
        log.info("deleted topic %s", name)
        return topic

    def create_partitions(self, name: str, count: int, validate_only: bool) -> None:
        topic = self.store.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        if topic.internal:
            raise KafkaError(ErrorCode.invalid_request, f"{name} is internal; its partition count is fixed")
        if count <= topic.partitions:
            raise KafkaError(
                ErrorCode.invalid_partitions,
                f"topic {name!r} has {topic.partitions} partitions; the count can only grow (asked {count})",
            )
        if count > MAX_PARTITIONS:
            raise KafkaError(ErrorCode.invalid_partitions, f"at most {MAX_PARTITIONS} partitions")
        if validate_only:
            return
        old = topic.partitions
        updated = topic.model_copy(update={"partitions": count})
        self.store.put(updated)
        self._host_partitions(updated, range(old, count))

    def alter_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        topic = self.store.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        self.store.put(topic.model_copy(update={"configs": configs}))
        self.logs.update_settings(name, TopicSettings(self.config, configs))

    def auto_create(self, name: str) -> TopicInfo | None:
        """Creates a topic on first use when auto.create.topics.enable is set."""
        if not self.config["auto.create.topics.enable"]:
            return None
        try:
            return self.create_topic(name, -1, -1, {})
        except KafkaError as exc:
            if exc.code == ErrorCode.topic_already_exists:
                return self.store.get(name)
            raise

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    # -- producer ids ----------------------------------------------------------------------

    def allocate_producer_id(self) -> int:
        """Ids come from durable blocks so a restart never hands out an id twice."""
        if self._next_pid >= self._pid_block_end:
            self._next_pid = self.store.allocate_producer_ids(PRODUCER_ID_BLOCK)
            self._pid_block_end = self._next_pid + PRODUCER_ID_BLOCK
        pid = self._next_pid
        self._next_pid += 1
        return pid
