"""Broker and topic configuration, with Kafka's property names.

One table (`BROKER_PROPERTIES`, `TOPIC_PROPERTIES`) drives parsing, validation,
DescribeConfigs and the configuration reference in docs/configuration.md. Values come from, in
increasing priority: defaults, a Kafka-style `.properties` file, `DM_*` environment variables
(`DM_LOG_SEGMENT_BYTES` for `log.segment.bytes`), then command-line overrides.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .config_error import ConfigError
from .groups.assignors import short_name

LONG_MAX = (1 << 63) - 1


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
    kind: str  # "int", "float", "bool", "str", "choice", "list" (comma-separated)
    default: Any
    doc: str
    minimum: int | None = None
    choices: tuple[str, ...] = ()
    topic_name: str | None = None  # per-topic override that falls back to this broker property
    dynamic: bool = False  # a broker property that AlterConfigs may change at run time
    applied: bool = True  # False: a Kafka setting dm accepts (and returns) but does not act on
    # Kafka's PASSWORD type (passwords, keys, JAAS, inline PEM, the controller token): DescribeConfigs
    # returns it as null and sensitive, and dm never logs it
    secret: bool = False
    maximum: int | None = None
    # A Kafka setting dm does not implement: only these values (Kafka's default, or values that
    # change nothing in dm) are accepted; anything else is refused with INVALID_CONFIG, never ignored.
    only: tuple[str, ...] = ()

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
            if self.maximum is not None and value > self.maximum:
                raise ConfigError(f"{self.name} must be <= {self.maximum}, got {value}")
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
        if self.kind == "list":
            return ",".join(item.strip() for item in text.split(",") if item.strip())
        if self.kind == "choice" and text not in self.choices:
            raise ConfigError(f"{self.name} must be one of {', '.join(map(repr, self.choices))}, got {text!r}")
        return text

    def render(self, value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)


PARTITIONERS = ("murmur3", "murmur2", "round_robin", "least_loaded")

# Group configs (Kafka's GroupConfig, set with kafka-configs --entity-type groups or IncrementalAlterConfigs
# on a GROUP resource). dm has the share group ones it acts on.
GROUP_PROPERTIES: dict[str, Property] = {
    p.name: p
    for p in [
        Property("share.auto.offset.reset", "choice", "latest",
                 "Where a share group starts reading a partition it has no state for: latest (records produced from "
                 "then on) or earliest (the log start).", choices=("latest", "earliest")),
        Property("share.record.lock.duration.ms", "int", 30_000,
                 "The share group's record lock duration (else group.share.record.lock.duration.ms), within "
                 "group.share.min/max.record.lock.duration.ms.", minimum=1000, maximum=3_600_000),
        Property("share.session.timeout.ms", "int", 45_000,
                 "The share group's session timeout (else group.share.session.timeout.ms), within "
                 "group.share.min/max.session.timeout.ms.", minimum=1),
        Property("share.heartbeat.interval.ms", "int", 5_000,
                 "The share group's heartbeat interval (else group.share.heartbeat.interval.ms), within "
                 "group.share.min/max.heartbeat.interval.ms.", minimum=1),
        Property("consumer.session.timeout.ms", "int", 45_000,
                 "A KIP-848 group's session timeout (else group.consumer.session.timeout.ms), within "
                 "group.consumer.min/max.session.timeout.ms.", minimum=1),
        Property("consumer.heartbeat.interval.ms", "int", 5_000,
                 "A KIP-848 group's heartbeat interval (else group.consumer.heartbeat.interval.ms), within "
                 "group.consumer.min/max.heartbeat.interval.ms.", minimum=1),
    ]
}
# The broker property that gives a group config its default and (with .min./.max.) its bounds.
GROUP_TO_BROKER = {name: f"group.{name}" for name in GROUP_PROPERTIES if name != "share.auto.offset.reset"}

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
        # -- the REST Proxy v2 surface (docs/http.md, ADR 0034) -----------------------------------------
        Property("http.listeners", "str", "",
                 "REST Proxy v2 listeners: HTTP://host:port and/or HTTPS://host:port (an empty host binds every "
                 "interface; port 0 picks a free one). An HTTPS listener takes listener.name.https.ssl.* (else "
                 "ssl.*). Empty: no REST Proxy."),
        Property("http.advertised.listeners", "str", "",
                 "What consumer instances' base_uri names, per scheme (default: the listeners, with "
                 "advertised.host where a listener's host is empty)."),
        Property("http.authentication.method", "choice", "NONE",
                 "NONE, or BASIC: HTTP Basic checked like a SASL/PLAIN login (the listener's PlainLoginModule "
                 "users, then the cluster's SCRAM credentials).", choices=("NONE", "BASIC")),
        Property("http.metrics.authentication.enable", "bool", True,
                 "With http.authentication.method=BASIC, /metrics on http.port asks for the same credentials as the "
                 "REST listeners (and DESCRIBE on the cluster under an authorizer): it names every topic and group. "
                 "false leaves it open, for a scraper a NetworkPolicy admits. /healthz and /readyz stay open."),
        Property("http.request.max.bytes", "int", 8 << 20, "Largest HTTP request body the REST Proxy reads; a "
                 "request declaring a larger Content-Length is answered 413 before its body is read.",
                 minimum=1024),
        Property("http.produce.max.records", "int", 10_000,
                 "Most records one REST produce request may carry (more: 422, before any is parsed). What a "
                 "produce costs grows with its records: 10,000 take a few tens of milliseconds of the broker's "
                 "event loop, the 2.8 million empty ones an 8 MiB body can hold took seconds.", minimum=1),
        Property("http.request.timeout.ms", "int", 30_000,
                 "How long a REST produce waits for the in-sync replicas before its records are reported failed, "
                 "how long a request body may take to arrive, and how long an HTTP connection may go without a "
                 "request (from when it opens and after each answer) before it is closed: headers trickled in "
                 "held connections open for ever.",
                 minimum=1),
        Property("http.partitioner.refresh.ms", "int", 500,
                 "How often least_loaded asks the partitions' leaders how many records they hold.", minimum=0),
        Property("http.consumer.max.instances", "int", 100,
                 "REST consumer instances one broker keeps at once (each is a group member with connections).",
                 minimum=0),
        Property("consumer.instance.timeout.ms", "int", 300_000,
                 "A REST consumer instance not used for this long (from the end of its last request) is closed "
                 "within a second (Confluent REST Proxy's name).",
                 minimum=1000),
        Property("consumer.request.timeout.ms", "int", 1000,
                 "Longest a REST records request waits for data (Confluent REST Proxy's name).", minimum=0),
        Property("consumer.request.max.bytes", "int", 64 << 20,
                 "Largest answer to a REST records request (Confluent REST Proxy's name).", minimum=1024),
        # -- listeners and security (Kafka's names; docs/security.md) --------------------------------
        Property("listeners", "str", "",
                 "Kafka listeners, NAME://host:port comma-separated (an empty host binds every interface), e.g. "
                 "PLAINTEXT://:9092,SASL_SSL://:9093. Empty: one PLAINTEXT listener on listener.host:listener.port."),
        Property("advertised.listeners", "str", "",
                 "What clients are told to connect to, per listener name (default: the listeners, with "
                 "advertised.host where a listener's host is empty)."),
        Property("listener.security.protocol.map", "str",
                 "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
                 "Listener name to security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)."),
        Property("inter.broker.listener.name", "str", "",
                 "The listener brokers use to reach each other (default: the one whose security protocol is "
                 "security.inter.broker.protocol)."),
        Property("security.inter.broker.protocol", "choice", "PLAINTEXT",
                 "Security protocol between brokers when inter.broker.listener.name is not set.",
                 choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
        Property("ssl.keystore.type", "choice", "PEM",
                 "Format of the broker's key and certificate: PEM (files or inline) or PKCS12 (JKS: convert with "
                 "keytool -importkeystore -deststoretype PKCS12).", choices=("PEM", "PKCS12", "JKS")),
        Property("ssl.keystore.location", "str", "",
                 "PEM: a file with the private key and the certificate chain (or the chain only, with the key in "
                 "ssl.keystore.key); PKCS12: the keystore. Re-read when it changes (rotation without a restart)."),
        Property("ssl.keystore.password", "str", "", "Password of a PKCS12 keystore.", secret=True),
        Property("ssl.key.password", "str", "", "Password of an encrypted PEM private key.", secret=True),
        Property("ssl.keystore.certificate.chain", "str", "",
                 "The certificate chain in PEM, inline (instead of ssl.keystore.location).", secret=True),
        Property("ssl.keystore.key", "str", "", "The private key in PEM, inline (with ssl.keystore.certificate.chain).",
                 secret=True),
        Property("ssl.truststore.type", "choice", "PEM", "Format of the trusted certificates: PEM or PKCS12.",
                 choices=("PEM", "PKCS12", "JKS")),
        Property("ssl.truststore.location", "str", "",
                 "CA certificates trusted for client certificates (mTLS) and, between brokers, for the other "
                 "brokers' certificates. Re-read when it changes."),
        Property("ssl.truststore.password", "str", "", "Password of a PKCS12 truststore.", secret=True),
        Property("ssl.truststore.certificates", "str", "", "Trusted CA certificates in PEM, inline.", secret=True),
        Property("ssl.client.auth", "choice", "none",
                 "Client certificates on SSL listeners: none, requested (verified when given) or required (mTLS).",
                 choices=("none", "requested", "required")),
        Property("ssl.enabled.protocols", "list", "TLSv1.2,TLSv1.3",
                 "TLS versions accepted (TLSv1.2 and TLSv1.3; older ones are refused)."),
        Property("ssl.protocol", "str", "TLSv1.3",
                 "Accepted for compatibility; the versions are ssl.enabled.protocols."),
        Property("ssl.cipher.suites", "list", "",
                 "Cipher suites for TLS 1.2, in OpenSSL or IANA names (empty: OpenSSL's secure defaults)."),
        Property("ssl.endpoint.identification.algorithm", "str", "https",
                 "Between brokers: https checks that a broker's certificate names its host; empty turns it off."),
        Property("ssl.principal.mapping.rules", "str", "DEFAULT",
                 "How an mTLS client's certificate subject becomes its principal: Kafka's RULE:pattern/replacement/"
                 "[LU] list, then DEFAULT (the whole subject, e.g. CN=app,O=example)."),
        Property("sasl.enabled.mechanisms", "list", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                 "SASL mechanisms SASL listeners offer: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (GSSAPI and "
                 "OAUTHBEARER are not supported)."),
        Property("sasl.mechanism.inter.broker.protocol", "str", "PLAIN",
                 "SASL mechanism brokers authenticate with when the inter-broker listener uses SASL."),
        Property("sasl.jaas.config", "str", "",
                 "JAAS configuration of the SASL mechanisms (Kafka's PlainLoginModule / ScramLoginModule "
                 "syntax): PLAIN's user_<name>=\"<password>\" entries, and username/password this broker uses "
                 "to authenticate to others. Usually per listener and mechanism: "
                 "listener.name.<listener>.<mechanism>.sasl.jaas.config.", secret=True),
        Property("sasl.server.max.receive.size", "int", 524288,
                 "Largest SASL token accepted before authentication; larger ones close the connection.", minimum=64),
        Property("connections.max.reauth.ms", "int", 0,
                 "SASL sessions expire after this long (KIP-368): the client re-authenticates on the same connection "
                 "or is disconnected at its next request. 0: sessions do not expire.", minimum=0),
        Property("max.connections", "int", 2**31 - 1,
                 "Connections the broker accepts at once (listener.name.<listener>.max.connections: on one "
                 "listener); more are closed as soon as accepted. The inter-broker listener is exempt from the "
                 "broker-wide limit.", minimum=0),
        Property("max.connections.per.ip", "int", 1000,
                 "Connections one client address may hold at once, on the Kafka listeners and on the REST Proxy's "
                 "each; more are closed as soon as accepted. Kafka's default is 2147483647; dm's bounds what one "
                 "address can take of the broker's descriptors (give a proxy or NAT address more with "
                 "max.connections.per.ip.overrides).", minimum=0),
        Property("max.connections.per.ip.overrides", "str", "",
                 "Per-address exceptions to max.connections.per.ip: host:count,host:count."),
        Property("connection.failed.authentication.delay.ms", "int", 100,
                 "A failed authentication is answered this much later (slows password guessing).", minimum=0),
        Property("authorizer.class.name", "str", "",
                 "Empty: no authorization (every request allowed). org.apache.kafka.metadata.authorizer."
                 "StandardAuthorizer, kafka.security.authorizer.AclAuthorizer or dm.StandardAuthorizer: Kafka's ACLs."),
        Property("super.users", "str", "",
                 "Principals allowed everything, semicolon-separated (User:admin;User:CN=broker-0)."),
        Property("allow.everyone.if.no.acl.found", "bool", False,
                 "With an authorizer: allow access to a resource that no ACL names at all."),
        Property("log.dirs", "str", "./data",
                 "Directories holding the partition logs, comma-separated (JBOD: new partitions go to the one "
                 "with the fewest; AlterReplicaLogDirs moves them). The first also holds the broker's own state."),
        Property("log.dirs.lock.wait.ms", "int", 0,
                 "How long a broker waits for its data directory's lock when another process holds it "
                 "(0: refuse to start at once). The operator sets 30 s: a force-deleted pod's replacement "
                 "may start while the old process is still being killed.", minimum=0),
        Property("log.dir.min.free.bytes", "int", -1,
                 "Free space kept under each log directory: a client's produce request that would leave less is "
                 "refused with the retriable KAFKA_STORAGE_ERROR until room is made, so a filling volume slows "
                 "producers before it stops the broker (replication and internal writes go on). -1: 5 % of the "
                 "file system, at most 1 GiB; 0: no floor. Not in Kafka.", minimum=-1, dynamic=True),
        Property("rack", "str", "", "Rack (failure domain) of this broker."),
        Property("num.partitions", "int", 1, "Partitions of auto-created topics.", minimum=1),
        Property("default.replication.factor", "int", 1, "Replication factor of auto-created topics.",
                 minimum=1),
        Property("auto.create.topics.enable", "bool", True,
                 "Create a topic when a client asks for its metadata (and allows auto-creation)."),
        Property("max.request.partition.size.limit", "int", 2000,
                 "The most partitions a DescribeTopicPartitions answer holds (KIP-966); a client's smaller "
                 "limit wins, and the answer's cursor says where the next request starts.", minimum=1),
        Property("num.io.threads", "int", 8,
                 "Threads for the work a broker does off its event loop: fsync, creating new partitions' logs "
                 "side by side (ADR 0032), log recovery and compaction passes, recompression of large batches "
                 "(the default executor; password hashing has its own "
                 "two). More brokers per node, not more threads, is how dm uses more cores (ADR 0028).", minimum=1),
        Property("process.roles", "choice", "broker",
                 "KRaft's roles of this process: broker, or broker,controller (either way a dm broker runs the "
                 "controller in-process unless --controller names one). controller alone is refused: that is "
                 "`dm controller`.", choices=("broker", "broker,controller")),
        Property("controller.quorum.bootstrap.servers", "str", "",
                 "KRaft's controller quorum: accepted so a Kafka server.properties starts, no effect (a dm broker "
                 "finds its controller with --controller or DM_CONTROLLER; ADR 0031).", applied=False),
        Property("controller.quorum.voters", "str", "",
                 "KRaft's static controller voters: accepted, no effect (see controller.quorum.bootstrap.servers).",
                 applied=False),
        Property("controller.listener.names", "str", "",
                 "KRaft's controller listeners: the listeners named here are not opened to Kafka clients (dm's "
                 "controller serves its own HTTP API), so the CONTROLLER entries of Kafka's listeners, "
                 "advertised.listeners and protocol map are accepted and left out."),
        Property("num.recovery.threads.per.data.dir", "int", 1,
                 "Threads opening (and after a crash recovering) the logs of each log directory at start-up.",
                 minimum=1),
        Property("share.coordinator.state.topic.replication.factor", "int", 3,
                 "Replication factor of __share_group_state, where share-partition state survives its leader "
                 "(capped at the live brokers when it is created).", minimum=1),
        Property("share.coordinator.state.topic.min.isr", "int", 2,
                 "min.insync.replicas of __share_group_state.", minimum=1),
        Property("share.coordinator.state.topic.num.partitions", "int", 50,
                 "Partitions of __share_group_state (fixed once the topic exists).", minimum=1),
        Property("num.network.threads", "int", 3,
                 "Accepted so a Kafka server.properties works; no effect: one event loop reads and writes every "
                 "connection of a broker (ADR 0028).", minimum=1, applied=False),
        Property("socket.send.buffer.bytes", "int", -1,
                 "SO_SNDBUF of accepted connections; -1: the operating system's (autotuned; Kafka's default is "
                 "102400).", minimum=-1),
        Property("socket.receive.buffer.bytes", "int", -1,
                 "SO_RCVBUF of accepted connections; -1: the operating system's (autotuned; Kafka's default is "
                 "102400).", minimum=-1),
        Property("socket.request.max.bytes", "int", 16 * 1024 * 1024,
                 "Largest request frame accepted; larger frames close the connection. Kafka's default is 100 MiB; "
                 "dm's is 16 MiB: a producer's request is at most its max.request.size (1 MiB by default in the "
                 "Java client, 1,000,000 bytes in librdkafka's message.max.bytes), and every frame being read "
                 "holds its memory. Raise it with message.max.bytes for larger batches.", minimum=1024),
        Property("socket.request.max.elements", "int", 50_000,
                 "Most array elements (topics, partitions, ids, names, nested ones included) one request may "
                 "carry; a request with more closes the connection before any of it is parsed or acted on. What "
                 "a request costs grows with its elements, not its bytes (a 1 MiB frame holds 262,144 partition "
                 "indexes). The default covers a client reading or committing 10,000 partitions at once several "
                 "times over.", minimum=100),
        Property("queued.max.request.bytes", "int", -1,
                 "Bytes the listeners' requests may hold at once, each counted at the size it declares from when it "
                 "starts arriving until it is handled (an acks=all produce: appended). While they are used up no "
                 "connection starts a new request (the clients wait; nothing is refused). 0 or -1: no limit. At "
                 "least socket.request.max.bytes.", minimum=-1),
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
        Property("log.message.timestamp.before.max.ms", "int", LONG_MAX,
                 "CreateTime topics: a batch with a record timestamp more than this before the broker's clock is "
                 "refused with INVALID_TIMESTAMP (KIP-937).", minimum=0,
                 topic_name="message.timestamp.before.max.ms"),
        Property("log.message.timestamp.after.max.ms", "int", LONG_MAX,
                 "CreateTime topics: a batch with a record timestamp more than this after the broker's clock is "
                 "refused with INVALID_TIMESTAMP (KIP-937).", minimum=0,
                 topic_name="message.timestamp.after.max.ms"),
        Property("log.message.timestamp.difference.max.ms", "int", LONG_MAX,
                 "CreateTime topics: a record timestamp further than this from the broker's clock, either way, is "
                 "refused with INVALID_TIMESTAMP (deprecated in Kafka for the two above).", minimum=0,
                 topic_name="message.timestamp.difference.max.ms"),
        Property("compression.type", "choice", "producer",
                 "The codec batches are stored with: producer keeps the producer's; uncompressed, gzip, snappy, "
                 "lz4 or zstd make the leader recompress batches that arrive otherwise (as Kafka does).",
                 choices=("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"), topic_name="compression.type"),
        Property("compression.gzip.level", "int", -1, "Level of the leader's gzip recompression (1-9; -1: 6).",
                 minimum=-1, maximum=9, topic_name="compression.gzip.level"),
        Property("compression.lz4.level", "int", 9, "Level of the leader's lz4 recompression (1-17).", minimum=1,
                 maximum=17, topic_name="compression.lz4.level"),
        Property("compression.zstd.level", "int", 3, "Level of the leader's zstd recompression (-131072-22).",
                 minimum=-131072, maximum=22, topic_name="compression.zstd.level"),
        Property("log.cleanup.policy", "choice", "delete",
                 "Segment clean-up policy: delete (retention), compact, both, or empty (\"\": neither — every record "
                 "is kept for good, as Kafka does with an empty policy).",
                 choices=("delete", "compact", "compact,delete", "delete,compact", ""),
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
        Property("controller.tls.server.name", "str", "",
                 "The name an https controller's certificate must carry, also sent as SNI (the operator answers "
                 "each secured cluster with a certificate its cluster CA signed for controller.<cluster>."
                 "<namespace>.dm); empty: the host of controller.url."),
        Property("controller.token", "str", "",
                 "Shared secret for the controller API (also DM_CONTROLLER_TOKEN). `dm controller` refuses to listen "
                 "on an address other than loopback without one.", secret=True),
        Property("controller.recovery.expected.brokers", "int", 0,
                 "How many brokers a controller that starts without its state waits for before it creates topics "
                 "(it recovers the topics from what they hold; ADR 0017); 0: one session timeout.", minimum=0),
        Property("controller.recovery.timeout.ms", "int", 300_000,
                 "The longest a recovering controller waits for controller.recovery.expected.brokers.", minimum=0),
        Property("broker.heartbeat.interval.ms", "int", 500, "How often a broker heartbeats to the controller.",
                 minimum=10),
        Property("broker.session.timeout.ms", "int", 6000,
                 "A broker that has not heartbeated for this long is fenced and loses its leaderships.", minimum=100),
        Property("quota.window.num", "int", 11,
                 "Samples a client quota's rate is measured over (Kafka's quota window).", minimum=1),
        Property("quota.window.size.seconds", "int", 1,
                 "Length of one sample of a client quota's rate, in seconds; also the longest throttle one request "
                 "gets under request_percentage, as in Kafka.", minimum=1),
        Property("fetch.max.bytes", "int", 57671680,
                 "Largest answer to a Fetch, whatever its max_bytes asks for; a first batch larger than this is "
                 "still sent whole (KIP-74).", minimum=1024),
        Property("max.incremental.fetch.session.cache.slots", "int", 1000,
                 "Incremental fetch sessions (KIP-227) a broker keeps for its followers and consumers; 0 turns "
                 "them off (every fetch then names and answers every partition).", minimum=0),
        Property("replica.lag.time.max.ms", "int", 30_000,
                 "A follower that has not caught up with the leader for this long leaves the ISR (caught up: a "
                 "fetch from the leader's log end, or one that has all the leader had at the previous fetch, as "
                 "in Kafka). Kafka's default since 2.5 (KIP-537); a dead broker leaves every ISR when it is "
                 "fenced, not after this.", minimum=10),
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
        Property("transaction.state.log.num.partitions", "int", 50,
                 "Partitions of __transaction_state (fixed once the topic exists).", minimum=1),
        Property("transaction.state.log.replication.factor", "int", 3,
                 "Replication factor of __transaction_state (capped at the number of brokers).", minimum=1),
        Property("transaction.state.log.min.isr", "int", 2,
                 "min.insync.replicas of __transaction_state (capped at its replication factor).", minimum=1),
        Property("transaction.state.log.segment.bytes", "int", 100 * 1024 * 1024,
                 "Segment size of __transaction_state.", minimum=1024),
        Property("transaction.max.timeout.ms", "int", 900_000,
                 "Largest transaction.timeout.ms a producer may ask for (INVALID_TRANSACTION_TIMEOUT above).",
                 minimum=1),
        Property("transactional.id.expiration.ms", "int", 604_800_000,
                 "A transactional id with no transaction for this long is forgotten.", minimum=1),
        Property("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10_000,
                 "How often transactions open longer than their timeout are looked for (and aborted).", minimum=1),
        Property("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3_600_000,
                 "How often expired transactional ids are removed.", minimum=1),
        Property("transaction.partition.verification.enable", "bool", True,
                 "A partition leader asks the transaction coordinator whether a transactional write belongs to an "
                 "ongoing transaction before it appends the first batch of it (KIP-890).", dynamic=True),
        Property("group.initial.rebalance.delay.ms", "int", 3000,
                 "How long the first rebalance of an empty group waits for more members.", minimum=0),
        Property("group.min.session.timeout.ms", "int", 6000, "Smallest session timeout a member may ask for.",
                 minimum=1),
        Property("group.max.session.timeout.ms", "int", 1_800_000, "Largest session timeout a member may ask for.",
                 minimum=1),
        Property("group.max.size", "int", 2**31 - 1, "Most members in one group.", minimum=1),
        # -- KIP-848 consumer groups (ADR 0037) ---------------------------------------------------------
        Property("group.coordinator.rebalance.protocols", "list", "classic,consumer",
                 "The group protocols served: classic (JoinGroup/SyncGroup) and consumer (KIP-848, "
                 "ConsumerGroupHeartbeat). Without consumer, ConsumerGroupHeartbeat answers UNSUPPORTED_VERSION."),
        Property("group.consumer.session.timeout.ms", "int", 45_000,
                 "A KIP-848 member that has not heartbeated for this long leaves its group.", minimum=1),
        Property("group.consumer.min.session.timeout.ms", "int", 45_000,
                 "Smallest group.consumer.session.timeout.ms accepted.", minimum=1),
        Property("group.consumer.max.session.timeout.ms", "int", 60_000,
                 "Largest group.consumer.session.timeout.ms accepted.", minimum=1),
        Property("group.consumer.heartbeat.interval.ms", "int", 5_000,
                 "How often a KIP-848 member heartbeats (the broker tells it).", minimum=1),
        Property("group.consumer.min.heartbeat.interval.ms", "int", 5_000,
                 "Smallest group.consumer.heartbeat.interval.ms accepted.", minimum=1),
        Property("group.consumer.max.heartbeat.interval.ms", "int", 15_000,
                 "Largest group.consumer.heartbeat.interval.ms accepted.", minimum=1),
        Property("group.consumer.max.size", "int", 2**31 - 1, "Most members in one KIP-848 consumer group.",
                 minimum=1),
        Property("group.consumer.migration.policy", "choice", "bidirectional",
                 "Online conversion of a group with live members between the classic and the KIP-848 protocol: "
                 "upgrade (a KIP-848 member joins a classic group), downgrade (the last KIP-848 member leaves a "
                 "group of classic members), bidirectional or disabled. Empty groups always convert.",
                 choices=("disabled", "upgrade", "downgrade", "bidirectional")),
        # -- share groups (KIP-932, ADR 0038) --------------------------------------------------------------
        Property("group.share.enable", "bool", True,
                 "Serve share groups (ShareGroupHeartbeat, ShareFetch, ShareAcknowledge); off, they are refused with "
                 "UNSUPPORTED_VERSION."),
        Property("group.share.session.timeout.ms", "int", 45_000,
                 "A share group member that has not heartbeated for this long leaves its group.", minimum=1),
        Property("group.share.min.session.timeout.ms", "int", 45_000,
                 "Smallest group.share.session.timeout.ms accepted.", minimum=1),
        Property("group.share.max.session.timeout.ms", "int", 60_000,
                 "Largest group.share.session.timeout.ms accepted.", minimum=1),
        Property("group.share.heartbeat.interval.ms", "int", 5_000, "How often a share group member heartbeats.",
                 minimum=1),
        Property("group.share.min.heartbeat.interval.ms", "int", 5_000,
                 "Smallest group.share.heartbeat.interval.ms accepted.", minimum=1),
        Property("group.share.max.heartbeat.interval.ms", "int", 15_000,
                 "Largest group.share.heartbeat.interval.ms accepted.", minimum=1),
        Property("group.share.max.size", "int", 200, "Most members in one share group.", minimum=1),
        Property("group.share.record.lock.duration.ms", "int", 30_000,
                 "How long a share consumer holds a record it fetched before it is offered to another.",
                 minimum=1000, maximum=3_600_000),
        Property("group.share.min.record.lock.duration.ms", "int", 15_000,
                 "Smallest group.share.record.lock.duration.ms accepted.", minimum=1000, maximum=30_000),
        Property("group.share.max.record.lock.duration.ms", "int", 60_000,
                 "Largest group.share.record.lock.duration.ms accepted.", minimum=30_000, maximum=3_600_000),
        Property("group.share.delivery.count.limit", "int", 5,
                 "A record delivered this many times without being accepted is archived (never delivered again).",
                 minimum=2, maximum=10),
        Property("group.share.partition.max.record.locks", "int", 2000,
                 "Most records of one share-partition in flight (fetched, not yet acknowledged) at once.",
                 minimum=100, maximum=10_000),
        Property("group.consumer.assignors", "list", "uniform,range",
                 "Server-side assignors a member may ask for with group.remote.assignor, the first the default: "
                 "uniform (balanced, sticky) and range (co-partitioned per topic); Kafka's class names "
                 "(org.apache.kafka.coordinator.group.assignor.UniformAssignor, ...RangeAssignor) work too."),
        Property("log.cleaner.enable", "bool", True, "Compact topics with cleanup.policy=compact.",),
        Property("log.cleaner.backoff.ms", "int", 15_000, "How often the cleaner looks for logs to compact.",
                 minimum=10),
        Property("log.cleaner.min.cleanable.ratio", "float", 0.5,
                 "Compact a log when this share of its closed segments was written since the last compaction.",
                 topic_name="min.cleanable.dirty.ratio"),
        Property("log.cleaner.min.compaction.lag.ms", "int", 0,
                 "A record stays uncompacted at least this long: segments with a younger record are not cleaned, "
                 "and their records do not yet make older values of their keys obsolete.", minimum=0,
                 topic_name="min.compaction.lag.ms"),
        Property("log.cleaner.max.compaction.lag.ms", "int", LONG_MAX,
                 "A compacted log whose oldest uncompacted record is older than this is cleaned whatever its dirty "
                 "ratio, and its active segment rolls at this age (KIP-354).", minimum=1,
                 topic_name="max.compaction.lag.ms"),
        Property("log.cleaner.delete.retention.ms", "int", 86_400_000,
                 "How long a tombstone (null value) survives compaction, so consumers see deletes.",
                 minimum=0, topic_name="delete.retention.ms"),
        Property("event.loop.stall.report.ms", "int", 1000,
                 "When the event loop has not turned for this long, a thread logs (WARNING) the stack it is stuck "
                 "in, once per stall, with its cause as dm_event_loop_stalls_total counts it (busy, blocked: the "
                 "stack is the culprit; run_queue, other_thread: only where the loop was): where a stall comes "
                 "from, not only that it happened (dm_event_loop_lag_seconds). 0 turns it off.", minimum=0),
        Property("metrics.per.partition.enabled", "bool", True,
                 "Export per-partition series (offsets, log size, group lag). false: the same metrics summed per "
                 "topic, without the partition label, for clusters whose partition count would make too many "
                 "series. Dynamic.", dynamic=True),
        Property("leader.replication.throttled.rate", "int", LONG_MAX,
                 "Bytes per second a leader sends to the throttled replicas of its partitions (reassignments). "
                 "Dynamic: AlterConfigs on the broker, or on all brokers with an empty broker name.",
                 minimum=1, dynamic=True),
        Property("follower.replication.throttled.rate", "int", LONG_MAX,
                 "Bytes per second a follower fetches for its throttled replicas (reassignments). Dynamic, as "
                 "leader.replication.throttled.rate.", minimum=1, dynamic=True),
    ]
}

# Topic configs with no broker counterpart: the throttled-replica lists dm acts on, and the Kafka
# topic configs dm accepts, stores and returns (DescribeConfigs) without acting on them, so tools and
# CreateTopics requests that set them work unchanged (docs/configuration.md lists them).
TOPIC_ONLY_PROPERTIES = [
    Property("leader.replication.throttled.replicas", "list", "",
             "Replicas (partition:broker, or *) whose leaders' sending is throttled by "
             "leader.replication.throttled.rate, besides the replicas a reassignment adds (always throttled)."),
    Property("follower.replication.throttled.replicas", "list", "",
             "Replicas (partition:broker, or *) whose fetching is throttled by "
             "follower.replication.throttled.rate, besides the replicas a reassignment adds (always throttled)."),
    Property("file.delete.delay.ms", "int", 60_000, "Accepted and stored (Kafka's clients and tools set it); no "
             "effect: dm deletes a segment at once, which no client can tell.", minimum=0, applied=False),
    Property("local.retention.bytes", "int", -2, "Tiered storage is not supported.", minimum=-2, applied=False,
             only=("-2",)),
    Property("local.retention.ms", "int", -2, "Tiered storage is not supported.", minimum=-2, applied=False,
             only=("-2",)),
    Property("message.downconversion.enable", "bool", True,
             "dm serves magic v2 only (Fetch v4 and newer), so there is nothing to down-convert either way.",
             applied=False),
    Property("message.format.version", "str", "3.0-IV1",
             "Accepted and stored, as Kafka 3.x does, and ignored: dm writes record batches of magic v2 whatever it "
             "says (Kafka 3.x ignores it too from inter.broker.protocol.version 3.0). A value that is not a Kafka "
             "version (0.10.0.0, 2.8-IV1, 3.0) is refused.", applied=False),
    Property("preallocate", "bool", False, "Accepted and stored; no effect: segments grow as written, which no "
             "client can tell.", applied=False),
    Property("remote.storage.enable", "bool", False, "Tiered storage is not supported.", applied=False,
             only=("false",)),
    Property("remote.log.copy.disable", "bool", False, "Tiered storage is not supported.", applied=False,
             only=("false",)),
    Property("remote.log.delete.on.disable", "bool", False, "Tiered storage is not supported.", applied=False,
             only=("false",)),
    Property("segment.index.bytes", "int", 10_485_760, "dm's sparse index grows as needed (segments do not roll "
             "on a full index).", minimum=4, applied=False, only=("10485760",)),
    Property("segment.jitter.ms", "int", 0, "Accepted and stored; no effect: segments roll at segment.ms "
             "exactly (the jitter only spreads segment rolls in time).", minimum=0, applied=False),
]

TOPIC_PROPERTIES: dict[str, Property] = {
    **{p.topic_name: Property(p.topic_name, p.kind, p.default, p.doc, p.minimum, p.choices, p.topic_name,
                              maximum=p.maximum)
       for p in BROKER_PROPERTIES.values() if p.topic_name},
    **{p.name: p for p in TOPIC_ONLY_PROPERTIES},
}
DYNAMIC_BROKER_PROPERTIES = {name for name, p in BROKER_PROPERTIES.items() if p.dynamic}
TOPIC_TO_BROKER = {p.topic_name: p.name for p in BROKER_PROPERTIES.values() if p.topic_name}


class BrokerConfig(BaseModel):
    """Validated broker configuration: `values` maps Kafka property names to typed values."""

    model_config = ConfigDict(frozen=True)
    values: dict[str, Any] = Field(default_factory=dict)
    explicit: frozenset[str] = frozenset()  # properties set by the operator (DescribeConfigs source)
    scoped: dict[str, Any] = Field(default_factory=dict)  # listener.name.<listener>.<property>, lower-cased

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    @property
    def log_dirs(self) -> list[Path]:
        return [Path(d.strip()) for d in str(self.values["log.dirs"]).split(",") if d.strip()]

    @property
    def data_dir(self) -> Path:
        """The first log directory: it also holds the broker's own state (checkpoints, metadata cache)."""
        return self.log_dirs[0]

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
        _apply_coarse_spellings(raw)
        _normalize_roles(raw)
        values = {name: prop.default for name, prop in BROKER_PROPERTIES.items()}
        scoped: dict[str, Any] = {}
        for name, value in raw.items():
            if name.startswith(LISTENER_PREFIX):
                scoped[name.lower()] = _listener_scoped(name).parse(value)
                continue
            prop = BROKER_PROPERTIES.get(name)
            if prop is None:
                raise ConfigError(f"unknown broker property {name!r}")
            values[name] = prop.parse(value)
        _check_consumer_group_settings(values)
        _check_request_memory(values)
        return cls(values=values, explicit=frozenset(raw), scoped=scoped)

    def for_listener(self, listener: str, name: str) -> Any:
        """A property as it applies to one listener: listener.name.<listener>.<name> over <name>."""
        key = f"{LISTENER_PREFIX}{listener.lower()}.{name}"
        return self.scoped[key] if key in self.scoped else self.values[name]

    def jaas_config(self, listener: str, mechanism: str) -> str:
        """The JAAS configuration of `mechanism` on `listener` (Kafka's lookup order)."""
        key = f"{LISTENER_PREFIX}{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
        return self.scoped.get(key) or self.for_listener(listener, "sasl.jaas.config")


LISTENER_PREFIX = "listener.name."
# Properties a listener may override with listener.name.<listener>.<property>, as in Kafka.
LISTENER_SCOPED = ("ssl.", "sasl.enabled.mechanisms", "sasl.jaas.config", "sasl.server.max.receive.size",
                   "connections.max.reauth.ms", "max.connections")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


GROUP_PROTOCOLS = ("classic", "consumer")


def _check_request_memory(values: Mapping[str, Any]) -> None:
    queued, largest = values["queued.max.request.bytes"], values["socket.request.max.bytes"]
    if 0 < queued < largest:  # as Kafka refuses it
        raise ConfigError(f"queued.max.request.bytes={queued} must be at least socket.request.max.bytes={largest} "
                          f"(or -1: no limit)")


def _check_consumer_group_settings(values: Mapping[str, Any]) -> None:
    """The KIP-848 settings that only make sense together (Kafka refuses the same at start)."""
    protocols = [p.lower() for p in values["group.coordinator.rebalance.protocols"].split(",") if p]
    unknown = [p for p in protocols if p not in GROUP_PROTOCOLS]
    if unknown or "classic" not in protocols:
        raise ConfigError(f"group.coordinator.rebalance.protocols: dm serves {', '.join(GROUP_PROTOCOLS)} and needs "
                          f"classic; got {values['group.coordinator.rebalance.protocols']!r}")
    assignors = [a for a in values["group.consumer.assignors"].split(",") if a]
    if not assignors or any(short_name(a) is None for a in assignors):
        raise ConfigError(f"group.consumer.assignors: dm has the uniform and range assignors; got "
                          f"{values['group.consumer.assignors']!r}")
    bounded = (("consumer", "session.timeout"), ("consumer", "heartbeat.interval"), ("share", "session.timeout"),
               ("share", "heartbeat.interval"), ("share", "record.lock.duration"))
    for kind, what in bounded:
        low, value, high = (values[f"group.{kind}.{m}{what}.ms"] for m in ("min.", "", "max."))
        if not low <= value <= high:
            raise ConfigError(f"group.{kind}.{what}.ms={value} must lie between group.{kind}.min.{what}.ms={low} "
                              f"and group.{kind}.max.{what}.ms={high}")
    for kind in ("consumer", "share"):
        if values[f"group.{kind}.heartbeat.interval.ms"] >= values[f"group.{kind}.session.timeout.ms"]:
            raise ConfigError(f"group.{kind}.heartbeat.interval.ms must be below group.{kind}.session.timeout.ms")


def _listener_scoped(name: str) -> Property:
    """The property a listener.name.<listener>.<...> key sets; ConfigError when it is not one."""
    rest = name[len(LISTENER_PREFIX):]
    listener, dot, suffix = rest.partition(".")
    if not listener or not dot:
        raise ConfigError(f"{name}: expected listener.name.<listener>.<property>")
    mechanism, _, jaas = suffix.partition(".")
    if jaas == "sasl.jaas.config" and mechanism.upper() in (*SASL_MECHANISMS, "GSSAPI", "OAUTHBEARER"):
        return Property(name, "str", "", "JAAS configuration of one mechanism on one listener.", secret=True)
    prop = BROKER_PROPERTIES.get(suffix)
    if prop is None or not suffix.startswith(LISTENER_SCOPED):
        raise ConfigError(f"unknown broker property {name!r} ({suffix!r} cannot be set per listener)")
    return Property(name, prop.kind, prop.default, prop.doc, prop.minimum, prop.choices, secret=prop.secret,
                    maximum=prop.maximum)


def without_effect(config: BrokerConfig) -> list[str]:
    """The properties given that change nothing in dm (applied=False), each with its documentation."""
    return [f"{name} ({BROKER_PROPERTIES[name].doc})" for name in sorted(config.explicit)
            if name in BROKER_PROPERTIES and not BROKER_PROPERTIES[name].applied]


def read_properties(path: Path) -> dict[str, str]:
    """Reads a Java-style .properties file (key=value or key: value, # and ! comments, a line ending
    in a backslash continues on the next, as JAAS configurations usually do)."""
    out: dict[str, str] = {}
    logical: list[tuple[int, str]] = []
    pending = ""
    start = 0
    for number, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith(("#", "!"))):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            pending += stripped[:-1]
            continue
        logical.append((start, (pending + stripped).strip()))
        pending = ""
    if pending:
        logical.append((start, pending.strip()))
    for lineno, stripped in logical:
        sep = min((i for i in (stripped.find("="), stripped.find(":")) if i > 0), default=-1)
        if sep < 0:
            raise ConfigError(f"{path}:{lineno}: expected key=value")
        out[stripped[:sep].strip()] = stripped[sep + 1 :].strip()
    return out


# Kafka's coarser spellings of a millisecond property: the finest one given wins (ms over minutes over
# hours), as in Kafka; they are read into the millisecond property and not kept apart.
COARSE_SPELLINGS: dict[str, tuple[str, int]] = {
    "log.retention.minutes": ("log.retention.ms", 60_000),
    "log.retention.hours": ("log.retention.ms", 3_600_000),
    "log.roll.hours": ("log.roll.ms", 3_600_000),
}


def _normalize_roles(raw: dict[str, Any]) -> None:
    if "process.roles" not in raw:
        return
    roles = sorted({r.strip() for r in str(raw["process.roles"]).split(",") if r.strip()})
    if roles == ["controller"]:
        raise ConfigError("process.roles=controller: a dm broker always has the broker role; a controller alone "
                          "is `dm controller`")
    raw["process.roles"] = ",".join(roles)


def _apply_coarse_spellings(raw: dict[str, Any]) -> None:
    for name in sorted(COARSE_SPELLINGS, key=lambda n: COARSE_SPELLINGS[n][1]):  # finest first
        if name not in raw:
            continue
        target, factor = COARSE_SPELLINGS[name]
        value = _parse_int(str(raw.pop(name)))
        if value < -1:
            raise ConfigError(f"{name} must be >= -1, got {value}")
        raw.setdefault(target, -1 if value == -1 else value * factor)


KAFKA_VERSION = re.compile(r"\d+\.\d+(\.\d+){0,2}(-IV\d+)?")  # what Kafka's MetadataVersion parses


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Checks topic-level overrides; returns them normalised. Raises ConfigError."""
    out: dict[str, str] = {}
    for name, value in configs.items():
        prop = TOPIC_PROPERTIES.get(name)
        if prop is None:
            raise ConfigError(f"unknown topic config {name!r}")
        if value is None:
            raise ConfigError(f"topic config {name!r} needs a value")
        parsed = prop.parse(value)
        rendered = prop.render(parsed)
        if prop.only and rendered not in prop.only:
            raise ConfigError(f"{name}={rendered} is not implemented by dm ({prop.doc} Accepted: "
                              f"{', '.join(prop.only)})")
        if name == "compression.gzip.level" and parsed == 0:
            raise ConfigError("compression.gzip.level must be 1-9, or -1 for gzip's default")
        if name == "message.format.version" and not KAFKA_VERSION.fullmatch(rendered):
            raise ConfigError(f"message.format.version={rendered} is not a Kafka version (e.g. 0.10.0.0, 3.0-IV1)")
        out[name] = rendered
    return out


class TopicSettings:
    """A topic's effective settings: its overrides over the broker defaults."""

    __slots__ = ("_values", "overrides")

    def __init__(self, broker: BrokerConfig, overrides: Mapping[str, str]) -> None:
        self.overrides = dict(overrides)
        self._values: dict[str, Any] = {}
        for topic_name, prop in TOPIC_PROPERTIES.items():
            if topic_name in overrides:
                self._values[topic_name] = prop.parse(overrides[topic_name])
            elif topic_name in TOPIC_TO_BROKER:
                self._values[topic_name] = broker[TOPIC_TO_BROKER[topic_name]]
            else:
                self._values[topic_name] = prop.default

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

