"""The DMCluster and Topic resources (group dm.dev, version v1alpha1) as pydantic models: the single
source of the CRDs in crds/ (`python -m dm_operator.crdgen` writes them) and of the reference in
docs/kubernetes.md. Field names are the resources' JSON names."""

from __future__ import annotations

from typing import Any, Literal

from kubernetes import client
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

# The CRDs' schema version (`dm.dev/schema-version` on each CRD): raised with every change of the models
# below, so an operator never replaces a newer schema with its older one (crds.py). SCHEMA_HISTORY
# keeps each version's schema hashes; a test fails when the models change without a new version.
SCHEMA_VERSION = "0.9.0"
SCHEMA_HISTORY: dict[str, dict[str, str]] = {
    "0.1.0": {"dmclusters": "c6cf04648509ffe5", "topics": "179363eaa2749f72"},
    "0.2.0": {"dmclusters": "d19a5f0de59a8587", "topics": "179363eaa2749f72"},
    "0.3.0": {"dmclusters": "f6bc46a0ebdb817a", "topics": "179363eaa2749f72", "users": "4ed8935debb7dd20"},
    "0.4.0": {"dmclusters": "cad499040d82891a", "topics": "179363eaa2749f72", "users": "986c756a44c5e11f"},
    "0.5.0": {"dmclusters": "7ef4088c6cb0270d", "topics": "179363eaa2749f72", "users": "986c756a44c5e11f"},
    "0.6.0": {"dmclusters": "678b39146b6ff5f6", "topics": "179363eaa2749f72", "users": "986c756a44c5e11f"},
    "0.7.0": {"dmclusters": "5d06f1d0dff6bc3e", "topics": "179363eaa2749f72", "users": "986c756a44c5e11f"},
    "0.8.0": {"dmclusters": "8190e17785e49e78", "topics": "179363eaa2749f72", "users": "986c756a44c5e11f"},
    "0.9.0": {"dmclusters": "dbacfefce1c63613", "topics": "179363eaa2749f72", "users": "986c756a44c5e11f"},
}

QUANTITY = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[KMGTPE]i?|[mkMGTPE])?$"
K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
TOPIC_NAME = r"^[a-zA-Z0-9._-]+$"


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def known_part(model: type[BaseModel], data: Any, path: str = "spec") -> tuple[Any, list[str]]:
    """`data` without the fields `model` does not know, and their paths. The CRDs only move forward
    (crds.py): under a newer schema, the API server stores (and defaults) fields an older operator's
    models lack; it works with what it knows instead of refusing the resource."""
    if not isinstance(data, dict):
        return data, []
    kept: dict[str, Any] = {}
    unknown: list[str] = []
    for key, value in data.items():
        field = model.model_fields.get(key)
        if field is None:
            unknown.append(f"{path}.{key}")
            continue
        nested = _model_of(field.annotation)
        if nested is not None:
            value, deeper = known_part(nested, value, f"{path}.{key}")
            unknown += deeper
        kept[key] = value
    return kept, unknown


def _model_of(annotation: Any) -> type[BaseModel] | None:
    candidates = [annotation, *getattr(annotation, "__args__", ())]
    return next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)


# -- shared ---------------------------------------------------------------------------------------


class Condition(Model):
    """A Kubernetes-style condition."""

    type: str = Field(description="Ready, ConfigValid, ScaleDownBlocked, RollingRestart, ...")
    status: Literal["True", "False", "Unknown"] = Field(description="Whether the condition holds")
    reason: str = Field("", description="CamelCase reason")
    message: str = Field("", description="What happened, in words")
    lastTransitionTime: str | None = Field(None, description="When the status last changed")
    observedGeneration: int | None = Field(None, description="The spec generation this condition is about")


# -- DMCluster ------------------------------------------------------------------------------------


class LostNodeSpec(Model):
    replaceVolume: bool = Field(False, description="Give a broker whose volume is pinned to a node that no longer "
                                "exists (its Node object deleted) a new, empty volume once its pod has waited "
                                "afterSeconds; it catches up from the other replicas and the old volume is kept "
                                "(reclaimPolicy Retain). Off: the VolumesOnLostNodes condition names such brokers, "
                                "and annotating a claim dm.dev/replace-volume=true replaces that one")
    afterSeconds: int = Field(300, ge=0, le=86_400, description="How long a broker's pod waits unscheduled for a "
                              "lost node's volume before replaceVolume gives it a new one")


class StorageSpec(Model):
    size: str = Field("10Gi", pattern=QUANTITY, description="Size of each broker's PersistentVolumeClaim")
    storageClassName: str | None = Field(None, description="StorageClass of the claims (default: the cluster's)")
    deleteClaim: bool = Field(False, description="Delete the brokers' claims (and their data) when the DMCluster "
                                                 "is deleted; kept by default")
    lostNode: LostNodeSpec = Field(default_factory=LostNodeSpec, description="Brokers whose node-local volume's "
                                   "node is gone (ADR 0054)")


class Resources(Model):
    requests: dict[str, str | int] = Field(default_factory=dict, description="cpu, memory, ... of each broker")
    limits: dict[str, str | int] = Field(default_factory=dict, description="cpu, memory, ... of each broker")


class RackSpec(Model):
    topologyKey: str = Field("topology.kubernetes.io/zone",
                             description="Node label whose value is a broker's rack: replicas of a partition are "
                                         "placed in different racks, and brokers spread over them")


PROMETHEUS_PODS: list[dict[str, Any]] = [{"namespaceSelector": {},
                                          "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}]


class NetworkPolicySpec(Model):
    enabled: bool = Field(True, description="A NetworkPolicy on the brokers (`<cluster>-brokers`): their Kafka and "
                          "REST listeners open to clientsFrom, their HTTP port (8080: /metrics, /healthz, /readyz) to "
                          "metricsFrom only, everything else closed. Takes effect where the network plugin enforces "
                          "NetworkPolicies (the kubelet's probes come from the node)")
    clientsFrom: list[dict[str, Any]] | None = Field(
        None, description="NetworkPolicyPeers admitted to the Kafka and REST listeners (absent: any source, inside "
                          "the cluster or out); the brokers always reach each other")
    metricsFrom: list[dict[str, Any]] = Field(
        default_factory=lambda: [dict(peer) for peer in PROMETHEUS_PODS],
        description="NetworkPolicyPeers admitted to the brokers' HTTP port (default: pods labelled "
                    "app.kubernetes.io/name=prometheus in any namespace, as the Prometheus Operator labels them)")

    @field_validator("clientsFrom", "metricsFrom")
    @classmethod
    def _peers(cls, peers: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for peer in peers or ():
            checked = _PEER.validate_python(peer)
            if checked.pod_selector is None and checked.namespace_selector is None and checked.ip_block is None:
                raise ValueError(f"a NetworkPolicyPeer needs podSelector, namespaceSelector or ipBlock: {peer}")
        return peers


class RebalanceSpec(Model):
    throttle: int = Field(50_000_000, ge=0, description="Replication throttle in bytes/s per broker (both the "
                          "leader and the follower rate) while the operator moves partitions: scale-down drains, "
                          "spreading onto added brokers, replication factor changes. Set before the moves and "
                          "removed after them; 0 moves unthrottled")


class LocalObjectReference(Model):
    name: str = Field(min_length=1, description="Name of a Secret in the DMCluster's namespace")


class PodTemplate(Model):
    labels: dict[str, str] = Field(default_factory=dict, description="Extra labels on broker pods")
    annotations: dict[str, str] = Field(default_factory=dict, description="Extra annotations on broker pods")
    tolerations: list[dict[str, Any]] = Field(default_factory=list, description="Pod tolerations")
    nodeSelector: dict[str, str] = Field(default_factory=dict, description="Pod nodeSelector")
    affinity: dict[str, Any] | None = Field(None, description="Pod affinity; replaces the default anti-affinity "
                                                               "across nodes")
    priorityClassName: str | None = Field(None, description="Pod priorityClassName")

    # The CRD keeps these two as preserved objects (their schemas are large and grow with Kubernetes); checked
    # against the Kubernetes client's own models, a mistake is an invalid spec naming the field, not a 400 on
    # every pass (a wrong type) or a field the API server drops without a word (a typo, before strict
    # field validation).
    @field_validator("tolerations", "affinity")
    @classmethod
    def _is_its_kubernetes_type(cls, value: Any, info: ValidationInfo) -> Any:
        try:
            _KUBERNETES_TYPES[info.field_name].validate_python(value, strict=True)
        except ValidationError as exc:
            raise ValueError("; ".join(
                f"{''.join(_path_part(p) for p in e['loc']).lstrip('.')}: "
                f"{'unknown field' if e['type'] == 'extra_forbidden' else e['msg']}" for e in exc.errors())) from None
        return value


_PEER = TypeAdapter(client.V1NetworkPolicyPeer)
_KUBERNETES_TYPES = {"tolerations": TypeAdapter(list[client.V1Toleration]),
                     "affinity": TypeAdapter(client.V1Affinity | None)}


def _path_part(part: int | str) -> str:
    return f"[{part}]" if isinstance(part, int) else f".{part}"


LISTENER_NAME = r"^[a-z][a-z0-9]{0,10}$"
DURATION = r"^[0-9]+(s|m|h|d)$"
RESERVED_PORTS = (8080, 9091)  # the brokers' HTTP port, and the replication listener's


class ListenerSpec(Model):
    name: str = Field(pattern=LISTENER_NAME, description="Name of the listener (lower case, at most 11 "
                      "characters); the broker's listener is its upper-case form")
    port: int = Field(ge=1024, le=65535, description=f"Port of the listener on every broker (not "
                      f"{' or '.join(map(str, RESERVED_PORTS))}: the operator's)")
    tls: bool = Field(False, description="TLS with the broker certificate the cluster CA signs; clients trust "
                      "the CA in the Secret <cluster>-cluster-ca-cert")
    authentication: Literal["none", "scram-sha-512", "tls"] = Field(
        "none", description="How clients authenticate: scram-sha-512 (SASL; Users with that authentication), "
                            "tls (client certificates the clients CA signs; needs tls: true), none")


class HttpSpec(Model):
    enabled: bool = Field(True, description="Serve the REST Proxy v2 on every broker (docs/http.md)")
    port: int = Field(8082, ge=1024, le=65535, description="Port of the REST Proxy on every broker and on the "
                      "bootstrap Service")
    tls: bool = Field(False, description="HTTPS with the broker certificate the cluster CA signs")
    authentication: Literal["none", "basic", "tls"] = Field(
        "none", description="basic: HTTP Basic with a User's scram-sha-512 password; tls: client certificates the "
                            "clients CA signs (needs tls: true); none")


class AuthorizationSpec(Model):
    type: Literal["simple"] = Field("simple", description="Kafka's ACLs (Users carry theirs)")
    superUsers: list[str] = Field(default_factory=list, description="Principals allowed everything, e.g. "
                                  "User:admin or User:CN=ops")


class CertificateAuthoritySpec(Model):
    generateCertificateAuthority: bool = Field(True, description="The operator makes the CA (and renews it). "
                                               "false: bring your own in the Secret <cluster>-cluster-ca (or "
                                               "-clients-ca) with ca.crt and ca.key")
    validity: str = Field("8760h", pattern=DURATION, description="Lifetime of the CA and of what it signs "
                          "(s, m, h or d)")
    renewBefore: str = Field("720h", pattern=DURATION, description="Renew this long before expiry (the CA, the "
                             "broker and user certificates)")

    @model_validator(mode="after")
    def _renews_within_validity(self) -> CertificateAuthoritySpec:
        from .certificates import duration

        if duration(self.renewBefore) >= duration(self.validity):
            raise ValueError(f"renewBefore ({self.renewBefore}) must be shorter than validity ({self.validity}): "
                             "certificates would be renewed on every pass")
        return self


DEFAULT_LISTENERS = [{"name": "plain", "port": 9092}]


class DMClusterSpec(Model):
    replicas: int = Field(3, ge=1, le=64, description="Number of brokers")
    image: str | None = Field(None, description="Broker image (default: the operator's own image)")
    imagePullPolicy: Literal["Always", "IfNotPresent", "Never"] = Field("IfNotPresent",
                                                                        description="Image pull policy of brokers")
    imagePullSecrets: list[LocalObjectReference] | None = Field(
        None, description="Secrets to pull the broker image with (default: the operator's, DM_IMAGE_PULL_SECRETS)")
    resources: Resources = Field(default_factory=Resources, description="Resources of each broker container; "
                                 "without requests, a broker requests cpu 250m and memory 512Mi (a resource that "
                                 "has a limit requests its limit, as Kubernetes does)")
    storage: StorageSpec = Field(default_factory=StorageSpec, description="Each broker's persistent volume")
    config: dict[str, Any] = Field(default_factory=dict, description="Broker properties by dm's names "
                                   "(docs/configuration.md), e.g. min.insync.replicas: 2; values are strings, "
                                   "numbers or booleans. Unknown or invalid ones are reported in the ConfigValid "
                                   "condition and not rolled out")
    rack: RackSpec | None = Field(None, description="Rack awareness from a node label (off when absent)")
    template: PodTemplate = Field(default_factory=PodTemplate, description="Broker pod overrides")
    rebalance: RebalanceSpec = Field(default_factory=RebalanceSpec, description="How the operator moves partitions")
    listeners: list[ListenerSpec] = Field(
        default_factory=lambda: [ListenerSpec(**x) for x in DEFAULT_LISTENERS], min_length=1, max_length=8,
        description="Kafka listeners (Strimzi's shape). With any TLS or authentication, or authorization, brokers "
                    "replicate over an operator-managed mutual-TLS listener on port 9091")
    http: HttpSpec | None = Field(None, description="The REST Proxy v2 (HTTP produce and consume) on every broker; "
                                  "off when absent")
    authorization: AuthorizationSpec | None = Field(None, description="ACLs: on when set (the brokers' own "
                                                    "principal is a super user)")
    clusterCa: CertificateAuthoritySpec = Field(default_factory=CertificateAuthoritySpec,
                                                description="The CA of the brokers' certificates")
    clientsCa: CertificateAuthoritySpec = Field(default_factory=CertificateAuthoritySpec,
                                                description="The CA of the Users' client certificates")
    networkPolicy: NetworkPolicySpec = Field(default_factory=NetworkPolicySpec,
                                             description="Who may reach the brokers' ports")

    @field_validator("listeners")
    @classmethod
    def _listeners_are_consistent(cls, listeners: list[ListenerSpec]) -> list[ListenerSpec]:
        problems = []
        names = [li.name for li in listeners]
        ports = [li.port for li in listeners]
        if len(set(names)) != len(names):
            problems.append("listener names must differ")
        if len(set(ports)) != len(ports):
            problems.append("listener ports must differ")
        for li in listeners:
            if li.port in RESERVED_PORTS:
                problems.append(f"listener {li.name}: port {li.port} is the operator's")
            if li.name == "replication":
                problems.append("listener name replication is the operator's")
            if li.authentication == "tls" and not li.tls:
                problems.append(f"listener {li.name}: authentication tls needs tls: true")
        if problems:
            raise ValueError("; ".join(problems))
        return listeners

    @model_validator(mode="after")
    def _http_is_consistent(self) -> DMClusterSpec:
        http = self.http
        if http is None or not http.enabled:
            return self
        problems = []
        if http.port in RESERVED_PORTS:
            problems.append(f"http: port {http.port} is the operator's")
        if http.port in [li.port for li in self.listeners]:
            problems.append(f"http: port {http.port} is a listener's")
        if http.authentication == "tls" and not http.tls:
            problems.append("http: authentication tls needs tls: true")
        if problems:
            raise ValueError("; ".join(problems))
        return self


class HttpStatus(Model):
    url: str = Field(description="The REST Proxy's address for clients in the Kubernetes cluster (the bootstrap "
                     "Service); consumer instances answer with their broker's own address")
    tls: bool = Field(False, description="HTTPS (trusting <cluster>-cluster-ca-cert)")
    authentication: str = Field("none", description="How clients authenticate")


class ListenerStatus(Model):
    name: str = Field(description="Listener name")
    bootstrapServers: str = Field(description="host:port for clients in the Kubernetes cluster")
    tls: bool = Field(False, description="Clients connect with TLS (trusting <cluster>-cluster-ca-cert)")
    authentication: str = Field("none", description="How clients authenticate")


class CertificatesStatus(Model):
    clusterCaExpires: str | None = Field(None, description="When the cluster CA expires")
    clientsCaExpires: str | None = Field(None, description="When the clients CA expires")
    brokerCertificateExpires: str | None = Field(None, description="When the brokers' certificate expires")
    brokerCertificate: str | None = Field(None, description="SHA-256 fingerprint (first 16 hex digits) of the "
                                          "brokers' current certificate: each broker's `certificate` shows "
                                          "whether it serves it yet (brokers reload it without a restart)")


class BrokerStatus(Model):
    id: int = Field(description="Broker id (the pod's ordinal)")
    pod: str = Field(description="Pod name")
    ready: bool = Field(description="The pod is Ready")
    fenced: bool = Field(description="The controller has fenced the broker (not serving as a replica)")
    registered: bool = Field(description="The broker is registered with the controller")
    strayLogs: list[str] = Field(default_factory=list, description="Log directories the broker kept aside "
                                 "(no recorded decision allows deleting them): `dm strays` lists and deletes them")
    rack: str | None = Field(None, description="Rack (from the node label with rack awareness)")
    node: str | None = Field(None, description="Node the pod runs on")
    certificate: str | None = Field(None, description="Fingerprint of the certificate its TLS listeners present "
                                    "(from its heartbeats; several, comma-separated, while they differ)")
    lastFailure: str | None = Field(None, description="How the broker container last stopped with an error, from "
                                    "its pod (time, exit code, reason and the termination message, e.g. a full "
                                    "volume); none while it has not")


class DeletedTopicStatus(Model):
    topicId: str = Field(description="Id of a deleted topic")
    name: str = Field(description="Its name")


class AclStatus(Model):
    """One ACL as the controller keeps it (Kafka's enum names)."""

    resourceType: str = Field(description="TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID")
    resourceName: str = Field(description="Resource name or prefix")
    patternType: str = Field(description="LITERAL or PREFIXED")
    principal: str = Field(description="e.g. User:alice")
    host: str = Field(description="Client address, or *")
    operation: str = Field(description="READ, WRITE, ...")
    permission: str = Field(description="ALLOW or DENY")


class QuotaEntityPart(Model):
    type: Literal["user", "client-id"] = Field(description="Entity type")
    name: str | None = Field(None, description="Its name; absent for <default>")


class ClientQuotaStatus(Model):
    entity: list[QuotaEntityPart] = Field(description="A user, a client id, or both")
    values: dict[str, float] = Field(default_factory=dict, description="producer_byte_rate, consumer_byte_rate, "
                                     "request_percentage, controller_mutation_rate")


class ControllerState(Model):
    """The controller's cluster document (what `dm controller` keeps in cluster.json)."""

    nextProducerId: int = Field(0, description="First producer id of the next block handed to a broker")
    brokerConfigs: dict[str, dict[str, str]] = Field(default_factory=dict, description="Dynamic broker configs "
                                                     "by broker id (\"\": the cluster-wide defaults)")
    groupConfigs: dict[str, dict[str, str]] = Field(default_factory=dict, description="Group configs "
                                                    "(share.auto.offset.reset, ...) by group id")
    deletedTopics: list[DeletedTopicStatus] = Field(default_factory=list, description="The last topic deletions: "
                                                    "brokers delete only logs of these topic ids (or moved away)")
    acls: list[AclStatus] = Field(default_factory=list, description="The cluster's ACLs (SCRAM credentials are in "
                                  "the Secret <cluster>-scram-credentials)")
    clientQuotas: list[ClientQuotaStatus] = Field(default_factory=list, description="The cluster's client quotas")
    documentVersion: int = Field(0, description="Version of this document (compare-and-set)")


class RebalanceStatus(Model):
    throttle: int | None = Field(None, description="The replication throttle the operator set for its moves "
                                                   "(removed once they are done)")
    partitionsMoving: int = Field(0, description="Partitions being reassigned")
    bytesLeft: int = Field(0, description="Bytes the added replicas still lack, as their leaders last reported")


class DMClusterStatus(Model):
    observedGeneration: int | None = Field(None, description="The spec generation this status is about")
    conditions: list[Condition] = Field(default_factory=list, description="Ready, SpecValid, ConfigValid, "
                                        "Certificates, RollingRestart, ScaleDownBlocked, Rebalancing, StrayData, "
                                        "ClusterIdentity, CrdVersion, StorageChangePending, VolumesExpanded, "
                                        "VolumesOnLostNodes")
    clusterId: str | None = Field(None, description="Kafka cluster id")
    bootstrap: str | None = Field(None, description="Bootstrap address for clients in the cluster")
    replicas: int = Field(0, description="Broker pods that exist")
    readyReplicas: int = Field(0, description="Broker pods that are Ready")
    desiredReplicas: int = Field(0, description="spec.replicas as last applied")
    selector: str | None = Field(None, description="Label selector of the broker pods (scale subresource)")
    brokers: list[BrokerStatus] = Field(default_factory=list, description="Every broker, registered or not")
    controller: ControllerState | None = Field(None, description="The controller's cluster document")
    revision: str | None = Field(None, description="Hash of the broker pod template the brokers should run")
    balancedBrokers: int | None = Field(None, description="The cluster size partitions were last spread over "
                                                          "(a scale-up beyond it moves partitions onto new brokers)")
    rebalance: RebalanceStatus | None = Field(None, description="Partitions the operator is moving, and how much "
                                                                "is left to copy")
    listeners: list[ListenerStatus] = Field(default_factory=list, description="Bootstrap address of each listener")
    http: HttpStatus | None = Field(None, description="The REST Proxy's address, when spec.http enables it")
    certificates: CertificatesStatus | None = Field(None, description="CA and certificate lifetimes, and rotation")


# -- Topic ----------------------------------------------------------------------------------------


def immutable(what: str) -> dict[str, Any]:
    """A CEL rule (Kubernetes 1.25+; older API servers ignore it, and the operator refuses the change)."""
    return {"x-kubernetes-validations": [{"rule": "self == oldSelf", "message": f"{what} cannot change: the "
                                          "resource would manage another topic and leave this one unmanaged"}]}


class TopicSpec(Model):
    cluster: str = Field(min_length=1, max_length=63, pattern=K8S_NAME, json_schema_extra=immutable("cluster"),
                         description="Name of the DMCluster in the same namespace (fixed once set)")
    topicName: str | None = Field(None, min_length=1, max_length=249, pattern=TOPIC_NAME,
                                  json_schema_extra=immutable("topicName"),
                                  description="Kafka topic name when it differs from metadata.name (names "
                                              "Kubernetes does not allow, e.g. with '_' or capitals); fixed "
                                              "once set")
    partitions: int = Field(1, ge=1, le=10000, description="Number of partitions (can grow, never shrink)")
    replicas: int = Field(3, ge=1, le=64, description="Replication factor")
    config: dict[str, Any] = Field(default_factory=dict, description="Topic configs, e.g. min.insync.replicas: 2, "
                                                                    "retention.ms: 86400000")


class PartitionStatus(Model):
    partition: int = Field(description="Partition index")
    leader: int = Field(description="Broker id of the leader; -1 when offline")
    replicas: list[int] = Field(description="Broker ids holding a replica, the preferred leader first")
    isr: list[int] = Field(description="In-sync replicas")
    leaderEpoch: int = Field(description="Bumped at every leader change")
    partitionEpoch: int = Field(0, description="Bumped at every change of leader or ISR")
    addingReplicas: list[int] = Field(default_factory=list, description="Replicas a reassignment is adding")
    removingReplicas: list[int] = Field(default_factory=list, description="Replicas a reassignment is removing")
    recovering: bool = Field(False, description="Recovered from the brokers' logs after the controller lost its "
                                                "state: no leader until every replica has reported")


class TopicStatus(Model):
    observedGeneration: int | None = Field(None, description="The spec generation this status is about")
    conditions: list[Condition] = Field(default_factory=list, description="Ready, with the reason when not")
    topicName: str | None = Field(None, description="The Kafka topic name (this resource manages it for good)")
    cluster: str | None = Field(None, description="The DMCluster whose topic this is (fixed once set)")
    topicId: str | None = Field(None, description="The Kafka topic id")
    partitionCount: int | None = Field(None, description="Partitions the topic has")
    replicationFactor: int | None = Field(None, description="Replicas per partition")
    partitions: list[PartitionStatus] = Field(default_factory=list, description="Leader, replicas and ISR of "
                                              "every partition, as the controller keeps them")
    configs: dict[str, str] = Field(default_factory=dict, description="Configs in effect (non-default)")
    underReplicatedPartitions: int = Field(0, description="Partitions whose ISR is smaller than their replicas")
    offlinePartitions: int = Field(0, description="Partitions without a leader")
    documentVersion: int | None = Field(None, description="The controller's version of this topic (compare-and-set)")


# -- User -------------------------------------------------------------------------------------------


class AclResource(Model):
    type: Literal["topic", "group", "cluster", "transactionalId"] = Field(description="What the ACL is about")
    name: str | None = Field(None, description="Its name (not for cluster); * for every one")
    patternType: Literal["literal", "prefix"] = Field("literal", description="The name exactly, or a prefix")


class AclRule(Model):
    resource: AclResource = Field(description="The resource")
    operations: list[Literal["Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
                             "DescribeConfigs", "AlterConfigs", "IdempotentWrite", "All"]] = Field(
        min_length=1, description="Operations allowed (or denied)")
    host: str = Field("*", description="Client address the rule applies to")
    type: Literal["allow", "deny"] = Field("allow", description="Allow or deny")


class UserAuthentication(Model):
    type: Literal["scram-sha-512", "tls"] = Field(description="scram-sha-512: a generated password in the "
                                                  "Secret; tls: a client certificate the clients CA signs")


class UserAuthorization(Model):
    type: Literal["simple"] = Field("simple", description="Kafka's ACLs")
    acls: list[AclRule] = Field(default_factory=list, description="The user's ACLs (the operator keeps exactly "
                                "these for the user's principal)")


class UserQuotas(Model):
    producerByteRate: int | None = Field(None, ge=1, description="Bytes per second the user may produce to each "
                                         "broker (Kafka's producer_byte_rate)")
    consumerByteRate: int | None = Field(None, ge=1, description="Bytes per second the user may fetch from each "
                                         "broker (consumer_byte_rate)")
    requestPercentage: float | None = Field(None, gt=0, description="Share of one broker thread the user's "
                                            "requests may take, in percent (request_percentage)")
    controllerMutationRate: float | None = Field(None, gt=0, description="Partitions per second the user may "
                                                 "create or delete (controller_mutation_rate)")


class UserSpec(Model):
    cluster: str = Field(min_length=1, max_length=63, pattern=K8S_NAME, json_schema_extra=immutable("cluster"),
                         description="Name of the DMCluster in the same namespace (fixed once set)")
    authentication: UserAuthentication = Field(description="How the user authenticates")
    authorization: UserAuthorization | None = Field(None, description="The user's ACLs (the DMCluster needs "
                                                    "spec.authorization)")
    quotas: UserQuotas | None = Field(None, description="Client quotas on the user (Strimzi's KafkaUser "
                                      "spec.quotas): throttled, never refused, per broker")


class UserStatus(Model):
    observedGeneration: int | None = Field(None, description="The spec generation this status is about")
    conditions: list[Condition] = Field(default_factory=list, description="Ready, with the reason when not")
    username: str | None = Field(None, description="The user's name in Kafka (SASL user, or certificate subject)")
    principal: str | None = Field(None, description="The principal ACLs name, e.g. User:alice")
    secret: str | None = Field(None, description="The Secret with the user's credentials")
    acls: int = Field(0, description="ACLs the cluster holds for the user")


# -- the CRDs -------------------------------------------------------------------------------------


class CrdInfo(BaseModel):
    kind: str
    plural: str
    singular: str
    short_names: list[str]
    spec: type[BaseModel]
    status: type[BaseModel]
    description: str
    printer_columns: list[dict[str, Any]]
    scale: dict[str, str] | None = None


CRDS = [
    CrdInfo(
        kind="DMCluster", plural="dmclusters", singular="dmcluster", short_names=["dmc"],
        spec=DMClusterSpec, status=DMClusterStatus,
        description="A dm cluster: a StatefulSet of brokers on persistent volumes, run by the dm operator, which "
                    "also hosts the cluster's controller (its state is this resource's and its Topics' status).",
        printer_columns=[
            {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"},
            {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
            {"name": "Status", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].reason"},
            {"name": "Bootstrap", "type": "string", "jsonPath": ".status.bootstrap", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
        scale={"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
               "labelSelectorPath": ".status.selector"},
    ),
    CrdInfo(
        kind="Topic", plural="topics", singular="topic", short_names=["dmt", "dmtopic"],
        spec=TopicSpec, status=TopicStatus,
        description="A topic of a DMCluster. Its status shows every partition's leader, replicas and in-sync "
                    "replicas as the cluster's controller keeps them. Topics created through the Kafka API "
                    "appear as Topic resources too.",
        printer_columns=[
            {"name": "Cluster", "type": "string", "jsonPath": ".spec.cluster"},
            {"name": "Partitions", "type": "integer", "jsonPath": ".status.partitionCount"},
            {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicationFactor"},
            {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
            {"name": "Under-replicated", "type": "integer", "jsonPath": ".status.underReplicatedPartitions"},
            {"name": "Offline", "type": "integer", "jsonPath": ".status.offlinePartitions"},
            {"name": "Topic", "type": "string", "jsonPath": ".status.topicName", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    ),
    CrdInfo(
        kind="User", plural="users", singular="user", short_names=["dmu", "dmuser"],
        spec=UserSpec, status=UserStatus,
        description="A user of a DMCluster: credentials (a SCRAM-SHA-512 password or a client certificate) in a "
                    "Secret of the same name, and the user's ACLs. Deleting it removes both from the cluster.",
        printer_columns=[
            {"name": "Cluster", "type": "string", "jsonPath": ".spec.cluster"},
            {"name": "Authentication", "type": "string", "jsonPath": ".spec.authentication.type"},
            {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
            {"name": "Secret", "type": "string", "jsonPath": ".status.secret", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    ),
]
