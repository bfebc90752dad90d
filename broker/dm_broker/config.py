"""Broker and topic configuration, with Kafka's property names.

One table (`BROKER_PROPERTIES`, `TOPIC_PROPERTIES`) drives parsing, validation,
DescribeConfigs and the configuration reference in docs/configuration.md. Values come from, in
increasing priority: defaults, a Kafka-style `.properties` file, `DM_*` environment variables
(`DM_LOG_SEGMENT_BYTES` for `log.segment.bytes`), then command-line overrides.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

LONG_MAX = (1 << 63) - 1


class ConfigError(ValueError):
    """A configuration value is unknown or invalid."""


def _parse_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ConfigError(f"expected true or false, got {value!r}")


def _parse_int(value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise ConfigError(f"expected an integer, got {value!r}") from None


@dataclass(frozen=True)
class Property:
    name: str
    kind: str  # "int", "float", "bool", "str", "choice"
    default: Any
    doc: str
    minimum: int | None = None
    choices: tuple[str, ...] = ()
    topic_name: str | None = None  # per-topic override that falls back to this broker property

    def parse(self, raw: Any) -> Any:
        try:
            return self._parse(raw)
        except ConfigError as exc:
            message = str(exc)
            raise ConfigError(message if message.startswith(self.name) else f"{self.name}: {message}") from None

    def _parse(self, raw: Any) -> Any:
        if self.kind == "int":
            value = raw if isinstance(raw, int) and not isinstance(raw, bool) else _parse_int(str(raw))
            if self.minimum is not None and value < self.minimum:
                raise ConfigError(f"{self.name} must be >= {self.minimum}, got {value}")
            return value
        if self.kind == "bool":
            return raw if isinstance(raw, bool) else _parse_bool(str(raw))
        if self.kind == "float":
            try:
                value = float(raw)
            except ValueError:
                raise ConfigError(f"expected a number, got {raw!r}") from None
            if not 0 <= value <= 1:
                raise ConfigError(f"expected a ratio between 0 and 1, got {value}")
            return value
        text = str(raw).strip()
        if self.kind == "choice" and text not in self.choices:
            raise ConfigError(f"{self.name} must be one of {', '.join(self.choices)}, got {text!r}")
        return text

    def render(self, value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)


PARTITIONERS = ("murmur3", "murmur2", "round_robin", "least_loaded")

BROKER_PROPERTIES: dict[str, Property] = {
    p.name: p
    for p in [
        Property("node.id", "int", 0, "Broker id, unique in the cluster.", minimum=0),
        Property("listener.host", "str", "127.0.0.1", "Address the Kafka listener binds to."),
        Property("listener.port", "int", 9092, "Port of the Kafka listener (0 picks a free one).", minimum=0),
        Property("advertised.host", "str", "", "Host advertised in metadata (default: listener.host)."),
        Property("advertised.port", "int", 0, "Port advertised in metadata (0: the listener's port).", minimum=0),
        Property("http.port", "int", 8080, "Port of the HTTP side port (0 picks a free one, -1 disables).",
                 minimum=-1),
        Property("log.dirs", "str", "./data", "Directory holding the partition logs."),
        Property("log.dirs.lock.wait.ms", "int", 0,
                 "How long a broker waits for its data directory's lock when another process holds it "
                 "(0: refuse to start at once). The operator sets 30 s: a force-deleted pod's replacement "
                 "may start while the old process is still being killed.", minimum=0),
        Property("rack", "str", "", "Rack (failure domain) of this broker."),
        Property("num.partitions", "int", 1, "Partitions of auto-created topics.", minimum=1),
        Property("default.replication.factor", "int", 1, "Replication factor of auto-created topics.",
                 minimum=1),
        Property("auto.create.topics.enable", "bool", True,
                 "Create a topic when a client asks for its metadata (and allows auto-creation)."),
        Property("socket.request.max.bytes", "int", 100 * 1024 * 1024,
                 "Largest request frame accepted; larger frames close the connection.", minimum=1024),
        Property("message.max.bytes", "int", 1048588, "Largest record batch accepted (after compression).",
                 minimum=64, topic_name="max.message.bytes"),
        Property("log.segment.bytes", "int", 1 << 30, "Roll a new segment at this size.", minimum=1024,
                 topic_name="segment.bytes"),
        Property("log.roll.ms", "int", 7 * 24 * 3600 * 1000,
                 "Roll a new segment when the first batch of the active one is older than this.",
                 minimum=1, topic_name="segment.ms"),
        Property("log.retention.ms", "int", 7 * 24 * 3600 * 1000,
                 "Delete segments whose newest record is older than this (-1: keep forever).",
                 minimum=-1, topic_name="retention.ms"),
        Property("log.retention.bytes", "int", -1,
                 "Delete the oldest segments while a partition is larger than this (-1: no limit).",
                 minimum=-1, topic_name="retention.bytes"),
        Property("log.retention.check.interval.ms", "int", 300_000, "How often retention runs.", minimum=10),
        Property("log.flush.interval.messages", "int", LONG_MAX,
                 "fsync a partition after this many messages; 1 makes every acknowledged batch durable "
                 "on disk before the response.", minimum=1, topic_name="flush.messages"),
        Property("log.flush.interval.ms", "int", LONG_MAX,
                 "fsync a partition when its oldest unflushed message is this old.", minimum=0,
                 topic_name="flush.ms"),
        Property("log.flush.scheduler.interval.ms", "int", 1000, "How often the time-based flush is checked.",
                 minimum=10),
        Property("log.flush.offset.checkpoint.interval.ms", "int", 60_000,
                 "How often the recovery point is checkpointed (bounds the work of crash recovery).",
                 minimum=10),
        Property("log.index.interval.bytes", "int", 4096, "Bytes between two entries of the offset index.",
                 minimum=1, topic_name="index.interval.bytes"),
        Property("log.message.timestamp.type", "choice", "CreateTime", "Timestamp stored with records.",
                 choices=("CreateTime", "LogAppendTime"), topic_name="message.timestamp.type"),
        Property("log.cleanup.policy", "choice", "delete", "Segment clean-up policy.",
                 choices=("delete", "compact", "compact,delete", "delete,compact"),
                 topic_name="cleanup.policy"),
        Property("min.insync.replicas", "int", 1, "Replicas that must have a batch for acks=all.", minimum=1,
                 topic_name="min.insync.replicas"),
        Property("unclean.leader.election.enable", "bool", False,
                 "Allow electing a leader outside the ISR (may lose data).",
                 topic_name="unclean.leader.election.enable"),
        Property("partitioner", "choice", "murmur3",
                 "How dm picks a partition for records without one (the dm CLI): keyed records by "
                 "murmur3 or murmur2 of the key, keyless by round_robin or least_loaded.",
                 choices=PARTITIONERS, topic_name="partitioner"),
        Property("keyless.partitioner", "choice", "round_robin",
                 "Partitioner for keyless records when dm picks the partition.",
                 choices=("round_robin", "least_loaded"), topic_name="keyless.partitioner"),
        Property("producer.id.expiration.ms", "int", 86_400_000,
                 "Forget an idempotent producer's sequence state after this much inactivity.", minimum=1),
        Property("connections.max.idle.ms", "int", 600_000, "Close connections idle this long.", minimum=1),
        Property("controller.url", "str", "",
                 "HTTP address of the cluster's controller (e.g. http://127.0.0.1:9990); empty: a standalone "
                 "broker runs its own controller in-process."),
        Property("controller.token", "str", "", "Shared secret for the controller API (also DM_CONTROLLER_TOKEN)."),
        Property("broker.heartbeat.interval.ms", "int", 500, "How often a broker heartbeats to the controller.",
                 minimum=10),
        Property("broker.session.timeout.ms", "int", 6000,
                 "A broker that has not heartbeated for this long is fenced and loses its leaderships.", minimum=100),
        Property("replica.lag.time.max.ms", "int", 10_000,
                 "A follower that has not caught up with the leader for this long leaves the ISR.", minimum=10),
        Property("offsets.topic.num.partitions", "int", 50,
                 "Partitions of __consumer_offsets (fixed once the topic exists).", minimum=1),
        Property("offsets.topic.replication.factor", "int", 3,
                 "Replication factor of __consumer_offsets (capped at the number of brokers).", minimum=1),
        Property("offsets.topic.segment.bytes", "int", 100 * 1024 * 1024,
                 "Segment size of __consumer_offsets (smaller segments compact sooner).", minimum=1024),
        Property("offset.metadata.max.bytes", "int", 4096, "Largest metadata string of a committed offset.",
                 minimum=0),
        Property("offsets.retention.minutes", "float", 10080,
                 "Committed offsets of a group are deleted this long after the group became empty (consumer "
                 "groups) or after the commit (groups that only commit); fractions allowed.", minimum=0.001),
        Property("offsets.retention.check.interval.ms", "int", 600_000,
                 "How often expired committed offsets are looked for.", minimum=10),
        Property("group.initial.rebalance.delay.ms", "int", 3000,
                 "How long the first rebalance of an empty group waits for more members.", minimum=0),
        Property("group.min.session.timeout.ms", "int", 6000, "Smallest session timeout a member may ask for.",
                 minimum=1),
        Property("group.max.session.timeout.ms", "int", 1_800_000, "Largest session timeout a member may ask for.",
                 minimum=1),
        Property("group.max.size", "int", 2**31 - 1, "Most members in one group.", minimum=1),
        Property("log.cleaner.enable", "bool", True, "Compact topics with cleanup.policy=compact.",),
        Property("log.cleaner.backoff.ms", "int", 15_000, "How often the cleaner looks for logs to compact.",
                 minimum=10),
        Property("log.cleaner.min.cleanable.ratio", "float", 0.5,
                 "Compact a log when this share of its closed segments was written since the last compaction.",
                 topic_name="min.cleanable.dirty.ratio"),
        Property("log.cleaner.delete.retention.ms", "int", 86_400_000,
                 "How long a tombstone (null value) survives compaction, so consumers see deletes.",
                 minimum=0, topic_name="delete.retention.ms"),
    ]
}

TOPIC_PROPERTIES: dict[str, Property] = {
    p.topic_name: Property(p.topic_name, p.kind, p.default, p.doc, p.minimum, p.choices, p.topic_name)
    for p in BROKER_PROPERTIES.values()
    if p.topic_name
}
TOPIC_TO_BROKER = {p.topic_name: p.name for p in BROKER_PROPERTIES.values() if p.topic_name}


class BrokerConfig(BaseModel):
    """Validated broker configuration: `values` maps Kafka property names to typed values."""

    model_config = ConfigDict(frozen=True)
    values: dict[str, Any] = Field(default_factory=dict)
    explicit: frozenset[str] = frozenset()  # properties set by the operator (DescribeConfigs source)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    @property
    def data_dir(self) -> Path:
        return Path(self.values["log.dirs"])

    @property
    def node_id(self) -> int:
        return int(self.values["node.id"])

    @property
    def advertised_host(self) -> str:
        return self.values["advertised.host"] or self.values["listener.host"]

    @classmethod
    def build(
        cls,
        overrides: Mapping[str, Any] | None = None,
        properties_file: Path | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> BrokerConfig:
        raw: dict[str, Any] = {}
        if properties_file is not None:
            raw.update(read_properties(properties_file))
        env = os.environ if environ is None else environ
        for name in BROKER_PROPERTIES:
            key = "DM_" + name.upper().replace(".", "_")
            if key in env:
                raw[name] = env[key]
        raw.update(overrides or {})
        values = {name: prop.default for name, prop in BROKER_PROPERTIES.items()}
        for name, value in raw.items():
            prop = BROKER_PROPERTIES.get(name)
            if prop is None:
                raise ConfigError(f"unknown broker property {name!r}")
            values[name] = prop.parse(value)
        return cls(values=values, explicit=frozenset(raw))


def read_properties(path: Path) -> dict[str, str]:
    """Reads a Java-style .properties file (key=value, # comments)."""
    out: dict[str, str] = {}
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "!")):
            continue
        sep = min((i for i in (stripped.find("="), stripped.find(":")) if i > 0), default=-1)
        if sep < 0:
            raise ConfigError(f"{path}:{lineno}: expected key=value")
        out[stripped[:sep].strip()] = stripped[sep + 1 :].strip()
    return out


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Checks topic-level overrides; returns them normalised. Raises ConfigError."""
    out: dict[str, str] = {}
    for name, value in configs.items():
        prop = TOPIC_PROPERTIES.get(name)
        if prop is None:
            raise ConfigError(f"unknown topic config {name!r}")
        if value is None:
            raise ConfigError(f"topic config {name!r} needs a value")
        out[name] = prop.render(prop.parse(value))
    return out


class TopicSettings:
    """A topic's effective settings: its overrides over the broker defaults."""

    __slots__ = ("_values", "overrides")

    def __init__(self, broker: BrokerConfig, overrides: Mapping[str, str]) -> None:
        self.overrides = dict(overrides)
        self._values: dict[str, Any] = {}
        for topic_name, broker_name in TOPIC_TO_BROKER.items():
            if topic_name in overrides:
                self._values[topic_name] = TOPIC_PROPERTIES[topic_name].parse(overrides[topic_name])
            else:
                self._values[topic_name] = broker[broker_name]

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def items(self) -> list[tuple[str, Any]]:
        return list(self._values.items())

    @property
    def compacted(self) -> bool:
        return "compact" in self._values["cleanup.policy"]

    @property
    def deletes(self) -> bool:
        return "delete" in self._values["cleanup.policy"]

