"""Cluster metadata and the controller API's request/response bodies (pydantic)."""

from __future__ import annotations

import uuid

from pydantic import BaseModel, Field

NO_LEADER = -1


class BrokerInfo(BaseModel):
    node_id: int
    host: str
    port: int
    rack: str | None = None
    incarnation: str = ""  # changes with every process start
    epoch: int = 0  # broker epoch, bumped at every registration
    fenced: bool = False
    shutting_down: bool = False


class PartitionState(BaseModel):
    replicas: list[int]
    leader: int
    isr: list[int]
    leader_epoch: int = 0
    partition_epoch: int = 0
    # An ongoing reassignment (KIP-455): `replicas` is then target + the replicas being removed.
    adding_replicas: list[int] = Field(default_factory=list)
    removing_replicas: list[int] = Field(default_factory=list)

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


class ClusterDoc(BaseModel):
    cluster_id: str = Field(default_factory=lambda: uuid.uuid4().hex[:22])
    next_producer_id: int = 0
    # Dynamic broker configs: "" holds the cluster-wide defaults, "<id>" one broker's.
    broker_configs: dict[str, dict[str, str]] = Field(default_factory=dict)
    version: int = 0


class ClusterMetadata(BaseModel):
    """What brokers learn from the controller: a full snapshot at `version`."""

    version: int
    incarnation: str
    cluster_id: str
    controller_id: int = -1
    brokers: list[BrokerInfo]
    topics: dict[str, TopicDoc]
    broker_configs: dict[str, dict[str, str]] = Field(default_factory=dict)


class RegisterRequest(BaseModel):
    node_id: int
    host: str
    port: int
    rack: str | None = None
    incarnation: str


class RegisterResponse(BaseModel):
    broker_epoch: int
    cluster_id: str


class HeartbeatRequest(BaseModel):
    node_id: int
    broker_epoch: int


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
