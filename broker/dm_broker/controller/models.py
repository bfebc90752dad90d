"""Cluster metadata and the controller API's request/response bodies (pydantic)."""

from __future__ import annotations

import uuid

from pydantic import BaseModel, Field

from ..quotas.entities import ClientQuota
from ..security.acls import AclBinding, AclFilter
from ..security.scram import ScramCredential

NO_LEADER = -1


class ListenerEndpoint(BaseModel):
    """Where clients of one listener reach a broker."""

    host: str
    port: int
    security_protocol: str = "PLAINTEXT"


class TlsReport(BaseModel):
    """What a TLS listener has loaded (SHA-256 fingerprints), so the operator can show whether a
    renewed certificate has reached every broker (DMCluster status.brokers[].certificate)."""

    certificate: str = ""  # of the certificate it presents
    trusted: list[str] = Field(default_factory=list)  # of the CA certificates it trusts
    retained: bool = False  # trusts CAs no longer in its truststore file (until a restart)


class BrokerInfo(BaseModel):
    node_id: int
    host: str  # host and port: the inter-broker listener's advertised endpoint
    port: int
    rack: str | None = None
    listeners: dict[str, ListenerEndpoint] = Field(default_factory=dict)  # by listener name
    incarnation: str = ""  # changes with every process start
    epoch: int = 0  # broker epoch, bumped at every registration
    fenced: bool = False
    shutting_down: bool = False
    # Log directories kept aside because no recorded decision allows deleting them (ADR 0017).
    stray_logs: list[str] = Field(default_factory=list)
    tls: dict[str, TlsReport] = Field(default_factory=dict)  # from heartbeats, by listener


class PartitionState(BaseModel):
    replicas: list[int]
    leader: int
    isr: list[int]
    leader_epoch: int = 0
    partition_epoch: int = 0
    # An ongoing reassignment (KIP-455): `replicas` is then target + the replicas being removed.
    adding_replicas: list[int] = Field(default_factory=list)
    removing_replicas: list[int] = Field(default_factory=list)
    # Adopted from what brokers reported after the controller lost its state: no leader until every
    # replica has reported (then the most advanced one leads), or an unclean election.
    recovering: bool = False

    @property
    def reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> list[int]:
        return [r for r in self.replicas if r not in self.removing_replicas]

    @property
    def original_replicas(self) -> list[int]:
        return [r for r in self.replicas if r not in self.adding_replicas]


class TopicDoc(BaseModel):
    """One topic, stored as one document and updated with compare-and-set on `version`."""

    name: str
    topic_id: str = Field(default_factory=lambda: str(uuid.uuid4()))
    configs: dict[str, str] = Field(default_factory=dict)
    partitions: list[PartitionState]
    version: int = 0

    @property
    def uuid(self) -> uuid.UUID:
        return uuid.UUID(self.topic_id)


class DeletedTopic(BaseModel):
    """A topic deletion the controller recorded: brokers may delete that topic id's logs."""

    topic_id: str
    name: str


class ClusterDoc(BaseModel):
    cluster_id: str = Field(default_factory=lambda: uuid.uuid4().hex[:22])
    next_producer_id: int = 0
    # Dynamic broker configs: "" holds the cluster-wide defaults, "<id>" one broker's.
    broker_configs: dict[str, dict[str, str]] = Field(default_factory=dict)
    # The last topic deletions (oldest first, bounded): what allows a broker to delete a topic's logs.
    deleted_topics: list[DeletedTopic] = Field(default_factory=list)
    acls: list[AclBinding] = Field(default_factory=list)
    # SCRAM credentials by user and mechanism: salted, never a password (KIP-554).
    scram: dict[str, dict[str, ScramCredential]] = Field(default_factory=dict)
    quotas: list[ClientQuota] = Field(default_factory=list)  # client quotas (KIP-13/124/599)
    group_configs: dict[str, dict[str, str]] = Field(default_factory=dict)  # group id -> GROUP_PROPERTIES set
    version: int = 0


class ClusterMetadata(BaseModel):
    """What brokers learn from the controller: a full snapshot at `version`, or (`delta_from` >= 0) the
    snapshot at `delta_from` changed to `version`: `topics` holds the topics changed since, whole, and
    `removed_topics` those gone; everything else is whole (ADR 0033)."""

    version: int
    incarnation: str
    cluster_id: str
    controller_id: int = -1
    brokers: list[BrokerInfo]
    topics: dict[str, TopicDoc]
    broker_configs: dict[str, dict[str, str]] = Field(default_factory=dict)
    deleted_topics: list[DeletedTopic] = Field(default_factory=list)
    acls: list[AclBinding] = Field(default_factory=list)
    scram: dict[str, dict[str, ScramCredential]] = Field(default_factory=dict)
    quotas: list[ClientQuota] = Field(default_factory=list)
    group_configs: dict[str, dict[str, str]] = Field(default_factory=dict)
    delta_from: int = -1
    removed_topics: list[str] = Field(default_factory=list)

    def merged_into(self, known: ClusterMetadata) -> ClusterMetadata:
        """This delta applied to `known` (the snapshot at `delta_from`): a full snapshot at `version`
        that keeps `known`'s TopicDoc objects for the topics that did not change."""
        if self.delta_from < 0:
            return self
        if known.incarnation != self.incarnation or known.version != self.delta_from:
            raise ValueError(f"a delta from version {self.delta_from} of controller {self.incarnation[:8]} "
                             f"cannot apply to version {known.version} of {known.incarnation[:8]}")
        topics = {**known.topics, **self.topics}
        for name in self.removed_topics:
            topics.pop(name, None)
        return self.model_copy(update={"topics": topics, "delta_from": -1, "removed_topics": []})


class HeldPartition(BaseModel):
    """A partition log a broker holds, as it reports it when it registers (ADR 0017)."""

    topic: str
    partition: int
    topic_id: str | None = None  # from partition.metadata; None for a log written before it existed
    last_leader_epoch: int = -1  # the latest leader epoch in the log
    log_end_offset: int = 0
    log_start_offset: int = 0


class HeldTopic(BaseModel):
    """A topic as a broker's metadata cache last knew it (every partition, held here or not)."""

    topic_id: str
    configs: dict[str, str] = Field(default_factory=dict)
    replicas: list[list[int]] = Field(default_factory=list)  # per partition
    partition_epochs: list[int] = Field(default_factory=list)  # of those assignments
    partition_count: int = 0


class RegisterRequest(BaseModel):
    node_id: int
    host: str
    port: int
    rack: str | None = None
    listeners: dict[str, ListenerEndpoint] = Field(default_factory=dict)
    incarnation: str
    cluster_id: str | None = None  # from the broker's meta.properties; None for a new data directory
    holdings: list[HeldPartition] = Field(default_factory=list)
    topics: dict[str, HeldTopic] = Field(default_factory=dict)  # what the broker's metadata cache knew
    producer_id_end: int = 0  # above every producer id this broker was given or has seen
    stray_logs: list[str] = Field(default_factory=list)
    # log directories without meta.properties when the broker started: new, wiped or replaced (ADR 0047)
    new_log_dirs: list[str] = Field(default_factory=list)
    open_file_limit: int = 0  # its RLIMIT_NOFILE (0: unknown): what it can host is bounded by it


class RegisterResponse(BaseModel):
    broker_epoch: int
    cluster_id: str
    incarnation: str = ""  # the controller's: metadata of another incarnation is not acted on


class ClusterInfo(BaseModel):
    """What a starting broker asks the controller before it touches its logs."""

    cluster_id: str | None  # None: the controller has no cluster yet (it takes the first broker's)
    incarnation: str


class HeartbeatRequest(BaseModel):
    node_id: int
    broker_epoch: int
    stray_logs: list[str] = Field(default_factory=list)
    # Partitions this broker leads that a reassignment is growing: bytes the slowest added replica
    # still lacks ("<topic>:<partition>" -> bytes), for the operator's progress report.
    reassignment_lag: dict[str, int] = Field(default_factory=dict)
    tls: dict[str, TlsReport] = Field(default_factory=dict)  # per TLS listener: what it serves and trusts
    # Its logs of partitions without a leader, as they are now: an unclean election takes the most advanced
    # (registration reports go stale while a follower copies).
    leaderless_holdings: list[HeldPartition] = Field(default_factory=list)


class HeartbeatResponse(BaseModel):
    ok: bool
    fenced: bool = False
    reregister: bool = False


class AlterIsrRequest(BaseModel):
    node_id: int
    broker_epoch: int
    topic: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: list[int]


class AlterIsrResponse(BaseModel):
    error: str | None = None  # None when applied
    state: PartitionState | None = None


class AlterIsrBatch(BaseModel):
    """The ISR changes a leader asks for together (Kafka's AlterPartition carries many partitions): a broker
    back from a restart rejoins thousands of ISRs at once."""

    changes: list[AlterIsrRequest]


class AlterIsrBatchResponse(BaseModel):
    responses: list[AlterIsrResponse]  # in the order of the changes


class CreateTopicRequest(BaseModel):
    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str] = Field(default_factory=dict)
    assignments: list[list[int]] | None = None
    validate_only: bool = False
    internal: bool = False


class CreatePartitionsRequest(BaseModel):
    count: int
    assignments: list[list[int]] | None = None
    validate_only: bool = False


class AlterConfigsRequest(BaseModel):
    configs: dict[str, str]
    validate_only: bool = False


class ProducerIdBlock(BaseModel):
    first: int
    size: int



class BrokerConfigsRequest(BaseModel):
    broker: str  # "" for the cluster-wide defaults
    configs: dict[str, str | None]  # None deletes
    replace: bool = False  # AlterConfigs: the given set replaces the broker's dynamic configs
    validate_only: bool = False


class GroupConfigsRequest(BaseModel):
    group: str
    configs: dict[str, str | None]  # None deletes
    validate_only: bool = False


class ReassignmentRequest(BaseModel):
    topic: str
    partition: int
    replicas: list[int] | None  # None cancels


class ReassignmentsRequest(BaseModel):
    reassignments: list[ReassignmentRequest]


class PartitionResult(BaseModel):
    topic: str
    partition: int
    error: str | None = None
    message: str | None = None


class ElectLeadersRequest(BaseModel):
    unclean: bool = False
    partitions: list[tuple[str, int]] | None = None  # None: every partition


class PartitionResults(BaseModel):
    results: list[PartitionResult]


class AclsRequest(BaseModel):
    acls: list[AclBinding]


class AclResults(BaseModel):
    errors: list[str | None]  # per ACL: why it was refused, or None


class AclDeleteRequest(BaseModel):
    filters: list[AclFilter]


class AclDeleteResults(BaseModel):
    deleted: list[list[AclBinding]]  # per filter: the ACLs it matched, now deleted


class ScramAlteration(BaseModel):
    user: str
    mechanism: str
    credential: ScramCredential | None = None  # None: delete the user's credential for the mechanism
    iterations: int = 0  # as the client asked (checked against Kafka's bounds)


class ScramRequest(BaseModel):
    alterations: list[ScramAlteration]


class ScramResult(BaseModel):
    user: str
    error: str | None = None  # Kafka's error name, lower-case
    message: str | None = None


class ScramResults(BaseModel):
    results: list[ScramResult]


class QuotaOp(BaseModel):
    key: str
    value: float = 0.0
    remove: bool = False


class QuotaAlteration(BaseModel):
    entity: list[tuple[str, str | None]]  # as the request lists it: (type, name or None for <default>)
    ops: list[QuotaOp]


class QuotaRequest(BaseModel):
    alterations: list[QuotaAlteration]
    validate_only: bool = False


class QuotaResult(BaseModel):
    error: str | None = None  # Kafka's error name, lower-case
    message: str | None = None


class QuotaResults(BaseModel):
    results: list[QuotaResult]
