"""The controller's persistence in the custom resources' status: each topic document in its
Topic's status, the cluster document in the DMCluster's status. Every write is a merge patch that
carries the resourceVersion it was computed from, so the API server applies it only if nothing
changed the object since (409 otherwise). A conflict caused by a change that is not the controller's
(a user editing the spec, the operator writing conditions) is retried after checking that the
stored document version is still the expected one; a different document version is a real
conflict (ConflictError), as with the file store. A write is acknowledged only once the API server
accepted it, so persisted-before-visible holds as with `dm controller`.

Topics created through the Kafka API get a Topic resource here, so `kubectl get topics` lists every
topic; a topic deleted through the Kafka API takes its resource with it."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable
from typing import Any

from dm_broker.controller.models import ClusterDoc, DeletedTopic, PartitionState, TopicDoc
from dm_broker.controller.store import ConflictError
from dm_broker.quotas.entities import ClientQuota
from dm_broker.security.acls import AclBinding, Operation, PatternType, Permission, ResourceType
from dm_broker.security.scram import ScramCredential

from . import API_VERSION, naming
from .changes import offline, under_replicated
from .kube import ApiError, Kube
from .models import PartitionStatus
from .objects import Obj

log = logging.getLogger(__name__)
# Put on Topics by dm before ADR 0061; taken off wherever the operator meets it.
TOPIC_FINALIZER = "dm.dev/topic"
# A Topic's status holds every partition; with spec, metadata and conditions the object must stay under
# etcd's default request limit (1.5 MiB). 10,000 partitions of replication factor 3 take ~0.9 MB.
STATUS_BYTES_LIMIT = 1_100_000
CAS_RETRIES = 20
ChangeListener = Callable[[TopicDoc | None, TopicDoc, Obj], None]


def topic_status(doc: TopicDoc, cluster: str) -> Obj:
    """The status fields the store owns (the reconciler owns conditions and observedGeneration)."""
    return {
        "topicName": doc.name, "cluster": cluster, "topicId": doc.topic_id, "partitionCount": len(doc.partitions),
        "replicationFactor": len(doc.partitions[0].replicas) if doc.partitions else 0,
        # Fields at their defaults are left out: a large topic's status must fit in one object.
        "partitions": [PartitionStatus(partition=i, leader=p.leader, replicas=p.replicas, isr=p.isr,
                                       leaderEpoch=p.leader_epoch, partitionEpoch=p.partition_epoch,
                                       addingReplicas=p.adding_replicas, removingReplicas=p.removing_replicas,
                                       recovering=p.recovering).model_dump(exclude_defaults=True)
                       for i, p in enumerate(doc.partitions)],
        "configs": dict(doc.configs), "underReplicatedPartitions": under_replicated(doc),
        "offlinePartitions": offline(doc), "documentVersion": doc.version,
    }


def with_deletions(new: Obj, old: Obj) -> Obj:
    """A merge patch's view of a map: keys gone since `old` must be sent as null to be removed."""
    out: Obj = {}
    for key, value in new.items():
        before = old.get(key)
        out[key] = with_deletions(value, before) if isinstance(value, dict) and isinstance(before, dict) else value
    for key in old:
        if key not in new:
            out[key] = None
    return out


def doc_from_status(status: Obj) -> TopicDoc | None:
    if status.get("documentVersion") is None or not status.get("topicName"):
        return None
    partitions = [PartitionState(replicas=p["replicas"], leader=p["leader"], isr=p["isr"],
                                 leader_epoch=p["leaderEpoch"], partition_epoch=p.get("partitionEpoch", 0),
                                 adding_replicas=p.get("addingReplicas") or [],
                                 removing_replicas=p.get("removingReplicas") or [],
                                 recovering=bool(p.get("recovering")))
                  for p in sorted(status.get("partitions", []), key=lambda p: p["partition"])]
    return TopicDoc(name=status["topicName"], topic_id=status["topicId"], configs=status.get("configs") or {},
                    partitions=partitions, version=status["documentVersion"])


def topic_name_of(obj: Obj) -> str:
    """The topic a Topic resource manages: the one its status records once it has one (spec.topicName
    is fixed then: a change is refused, not followed), else the spec's (or the resource's name)."""
    recorded = (obj.get("status") or {}).get("topicName")
    return recorded or obj["spec"].get("topicName") or obj["metadata"]["name"]


def wanted_topic_name(obj: Obj) -> str:
    return obj["spec"].get("topicName") or obj["metadata"]["name"]


def acl_to_status(acl: AclBinding) -> dict[str, str]:
    return {"resourceType": acl.resource_type.name, "resourceName": acl.resource_name,
            "patternType": acl.pattern_type.name, "principal": acl.principal, "host": acl.host,
            "operation": acl.operation.name, "permission": acl.permission.name}


def acl_from_status(data: dict[str, str]) -> AclBinding:
    return AclBinding(resource_type=ResourceType[data["resourceType"]], resource_name=data["resourceName"],
                      pattern_type=PatternType[data["patternType"]], principal=data["principal"], host=data["host"],
                      operation=Operation[data["operation"]], permission=Permission[data["permission"]])


def quota_to_status(quota: ClientQuota) -> dict[str, Any]:
    return {"entity": [{"type": t, **({"name": n} if n is not None else {})} for t, n in quota.key],
            "values": dict(quota.values)}


def quota_from_status(data: dict[str, Any]) -> ClientQuota:
    return ClientQuota(entity={p["type"]: p.get("name") for p in data["entity"]}, values=data.get("values") or {})


def cluster_of(obj: Obj) -> str:
    """The DMCluster a Topic resource belongs to: recorded in its status once it has a topic."""
    return (obj.get("status") or {}).get("cluster") or obj.get("spec", {}).get("cluster", "")


class CrdStatusStore:
    def __init__(self, kube: Kube, namespace: str, cluster: str, cluster_uid: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.cluster = cluster
        self.cluster_uid = cluster_uid
        self.resources: dict[str, str] = {}  # topic name -> Topic resource name
        # Topic resource name -> the UID of the one holding its topic: a resource of that name with
        # another UID is a new resource, and the old one was deleted (ADR 0061).
        self.uids: dict[str, str] = {}
        self.resource_versions: dict[str, str] = {}  # resource name -> last resourceVersion we wrote or read
        self.docs: dict[str, TopicDoc] = {}  # what we last persisted, for change listeners
        self._cluster_rv: str | None = None
        self._cluster_version = -1
        self._broker_configs: dict[str, dict[str, str]] = {}
        self._group_configs: dict[str, dict[str, str]] = {}
        self._acls: list[AclBinding] = []
        self._scram: dict[str, dict[str, ScramCredential]] = {}
        self.listeners: list[ChangeListener] = []

    @property
    def cluster_path(self) -> str:
        return f"/apis/{API_VERSION}/namespaces/{self.namespace}/dmclusters/{self.cluster}"

    @property
    def topics_path(self) -> str:
        return f"/apis/{API_VERSION}/namespaces/{self.namespace}/topics"

    # -- the cluster document ----------------------------------------------------------------------

    async def load_cluster(self) -> ClusterDoc | None:
        """The cluster document in the DMCluster's status; None when it has none (a new DMCluster, or
        one re-created or restored without status: the controller then recovers from the brokers)."""
        obj = await self.kube.get(self.cluster_path)
        state = (obj.get("status") or {}).get("controller")
        cluster_id = (obj.get("status") or {}).get("clusterId")
        self._cluster_rv = obj["metadata"]["resourceVersion"]
        if state is None or not cluster_id:
            self._cluster_version = -1
            self._broker_configs = {}
            self._group_configs = {}
            return None
        self._cluster_version = state["documentVersion"]
        self._broker_configs = dict(state.get("brokerConfigs") or {})
        self._group_configs = dict(state.get("groupConfigs") or {})
        self._acls = [acl_from_status(a) for a in state.get("acls") or []]
        self._scram = await self._load_scram()
        return ClusterDoc(cluster_id=cluster_id, next_producer_id=state["nextProducerId"],
                          broker_configs=state.get("brokerConfigs") or {},
                          group_configs=state.get("groupConfigs") or {},
                          deleted_topics=[DeletedTopic(topic_id=t["topicId"], name=t["name"])
                                          for t in state.get("deletedTopics") or []],
                          acls=self._acls, scram=self._scram, quotas=[quota_from_status(q) for q in
                                                                      state.get("clientQuotas") or []],
                          version=state["documentVersion"])

    async def save_cluster(self, doc: ClusterDoc, expected_version: int) -> ClusterDoc:
        if expected_version != self._cluster_version:
            raise ConflictError(f"cluster document is at version {self._cluster_version}, not {expected_version}")
        return await self._write_cluster(doc.model_copy(update={"version": expected_version + 1}), expected_version)

    async def _write_cluster(self, doc: ClusterDoc, expected: int) -> ClusterDoc:
        if doc.scram != self._scram:
            await self._save_scram(doc.scram)  # first: the status never names a credential it does not hold
        status = {"clusterId": doc.cluster_id,
                  "controller": {"nextProducerId": doc.next_producer_id,
                                 "brokerConfigs": with_deletions(doc.broker_configs, self._broker_configs),
                                 "groupConfigs": with_deletions(doc.group_configs, self._group_configs),
                                 "deletedTopics": [{"topicId": t.topic_id, "name": t.name}
                                                   for t in doc.deleted_topics],
                                 "acls": [acl_to_status(a) for a in doc.acls],
                                 "clientQuotas": [quota_to_status(q) for q in doc.quotas],
                                 "documentVersion": doc.version}}
        for _ in range(CAS_RETRIES):
            try:
                obj = await self.kube.patch(f"{self.cluster_path}/status", {
                    "metadata": {"resourceVersion": self._cluster_rv}, "status": status})
                self._cluster_rv = obj["metadata"]["resourceVersion"]
                self._cluster_version = doc.version
                self._broker_configs = dict(doc.broker_configs)
                self._group_configs = dict(doc.group_configs)
                return doc
            except ApiError as exc:
                if exc.status != 409:
                    raise
            current = await self.kube.get(self.cluster_path)
            self._cluster_rv = current["metadata"]["resourceVersion"]
            stored = ((current.get("status") or {}).get("controller") or {}).get("documentVersion", -1)
            if stored != expected and not (expected == -1 and stored in (-1, None)):
                raise ConflictError(f"cluster document is at version {stored}, not {expected}")
        raise ConflictError("cluster document: too many concurrent changes")

    # -- SCRAM credentials: salted, but kept out of the status (readable by whoever may read DMClusters) --

    @property
    def scram_path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/secrets/{self.cluster}-scram-credentials"

    async def _load_scram(self) -> dict[str, dict[str, ScramCredential]]:
        obj = await self.kube.get_or_none(self.scram_path)
        raw = (obj or {}).get("data", {}).get("credentials.json")
        if not raw:
            return {}
        data = json.loads(base64.b64decode(raw))
        return {user: {m: ScramCredential.model_validate(c) for m, c in creds.items()} for user, creds in data.items()}

    async def _save_scram(self, scram: dict[str, dict[str, ScramCredential]]) -> None:
        text = json.dumps({u: {m: c.model_dump() for m, c in creds.items()} for u, creds in scram.items()})
        body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": f"{self.cluster}-scram-credentials", "namespace": self.namespace,
                             "labels": {"app.kubernetes.io/managed-by": "dm-operator",
                                        "app.kubernetes.io/instance": self.cluster},
                             "ownerReferences": [{"apiVersion": API_VERSION, "kind": "DMCluster", "name": self.cluster,
                                                  "uid": self.cluster_uid, "controller": True,
                                                  "blockOwnerDeletion": True}]},
                "data": {"credentials.json": base64.b64encode(text.encode()).decode()}}
        existing = await self.kube.get_or_none(self.scram_path)
        if existing is None:
            await self.kube.create(self.scram_path.rsplit("/", 1)[0], body)
        else:
            body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            await self.kube.replace(self.scram_path, body)
        self._scram = {u: dict(c) for u, c in scram.items()}

    # -- topic documents ---------------------------------------------------------------------------

    def refusal(self, doc: TopicDoc) -> str | None:
        size = len(json.dumps(topic_status(doc, self.cluster), separators=(",", ":")))
        if size <= STATUS_BYTES_LIMIT:
            return None
        rf = len(doc.partitions[0].replicas) if doc.partitions else 0
        return (f"topic {doc.name}: {len(doc.partitions)} partitions of replication factor {rf} do not fit in one "
                f"Topic resource's status ({size:,} bytes, at most {STATUS_BYTES_LIMIT:,}: etcd refuses larger "
                "objects); use fewer partitions, or several topics")

    async def list_topic_resources(self) -> list[Obj]:
        """This cluster's Topic resources: those whose status records this cluster, and those not
        recorded yet whose spec names it. A resource whose spec.cluster was changed stays this
        cluster's (the change is refused), and is not another cluster's."""
        everything = await self.kube.get(self.topics_path)
        return [o for o in everything.get("items", []) if cluster_of(o) == self.cluster]

    def _read(self, obj: Obj) -> TopicDoc | None:
        """A Topic resource as read from the API server: its version, its topic, its document."""
        name = obj["metadata"]["name"]
        self.resource_versions[name] = obj["metadata"]["resourceVersion"]
        doc = doc_from_status(obj.get("status") or {})
        if self.resources.setdefault(doc.name if doc else topic_name_of(obj), name) == name:
            self.uids[name] = obj["metadata"]["uid"]
        if doc is not None:
            self.docs[doc.name] = doc
        return doc

    async def load_topics(self) -> dict[str, TopicDoc]:
        docs = [self._read(obj) for obj in await self.list_topic_resources()]
        return {doc.name: doc for doc in docs if doc is not None}

    async def load_topic(self, name: str) -> TopicDoc | None:
        """The stored document of one topic, read again (after a conflict)."""
        resource = self.resources.get(name)
        obj = await self.kube.get_or_none(f"{self.topics_path}/{resource}") if resource else None
        doc = self._read(obj) if obj is not None else None
        return doc if doc is not None and doc.name == name else None

    def remember(self, obj: Obj) -> None:
        """A Topic resource seen through a listing: where its topic lives."""
        name = obj["metadata"]["name"]
        if self.resources.setdefault(topic_name_of(obj), name) == name:
            self.uids.setdefault(name, obj["metadata"]["uid"])
        self.resource_versions.setdefault(name, obj["metadata"]["resourceVersion"])

    def forget(self, topic: str) -> None:
        """The topic's resource was deleted and the topic is not (ADR 0061): its next change, if any,
        gets a new resource."""
        resource = self.resources.pop(topic, None)
        if resource is not None:
            self.uids.pop(resource, None)
            self.resource_versions.pop(resource, None)

    async def recreate_resource(self, doc: TopicDoc) -> str:
        """A new resource for a topic whose resource was deleted but which stays (an internal topic,
        which cannot be deleted): it holds the document at the same version. Returns its name."""
        self.forget(doc.name)
        resource = await self._resource_for(doc)
        obj = await self.kube.patch(f"{self.topics_path}/{resource}/status",
                                    {"status": topic_status(doc, self.cluster)})
        self.resource_versions[resource] = obj["metadata"]["resourceVersion"]
        self.docs[doc.name] = doc
        return resource

    async def save_topic(self, doc: TopicDoc, expected_version: int) -> TopicDoc:
        known = self.docs.get(doc.name)
        current = known.version if known else -1
        if expected_version != current:
            raise ConflictError(f"topic {doc.name} is at version {current}, not {expected_version}")
        new = doc.model_copy(update={"version": expected_version + 1})
        resource = await self._resource_for(new)
        path = f"{self.topics_path}/{resource}/status"
        status = topic_status(new, self.cluster)
        status["configs"] = with_deletions(status["configs"], dict(known.configs) if known else {})
        for _ in range(CAS_RETRIES):
            rv = self.resource_versions.get(resource)
            if rv is None:
                rv = (await self.kube.get(f"{self.topics_path}/{resource}"))["metadata"]["resourceVersion"]
            try:
                obj = await self.kube.patch(path, {"metadata": {"resourceVersion": rv}, "status": status})
                self.resource_versions[resource] = obj["metadata"]["resourceVersion"]
                self.docs[new.name] = new
                for listener in self.listeners:
                    listener(known, new, obj)
                return new
            except ApiError as exc:
                if exc.status == 404:
                    raise ConflictError(f"the Topic resource of {doc.name} is gone") from None
                if exc.status != 409:
                    raise
            fresh = await self.kube.get(f"{self.topics_path}/{resource}")
            self.resource_versions[resource] = fresh["metadata"]["resourceVersion"]
            stored = (fresh.get("status") or {}).get("documentVersion")
            if not (stored == expected_version or (expected_version < 0 and stored is None)):
                raise ConflictError(f"topic {doc.name}: the stored document is at version {stored}, "
                                    f"not {expected_version}")
        raise ConflictError(f"topic {doc.name}: too many concurrent changes")

    async def _resource_for(self, doc: TopicDoc) -> str:
        """The Topic resource holding `doc`; created for topics born through the Kafka API."""
        resource = self.resources.get(doc.name)
        if resource is not None:
            return resource
        taken = False
        for _ in range(2):
            name = naming.topic_resource_name(doc.name, self.cluster, taken)
            spec: Obj = {"cluster": self.cluster, "partitions": len(doc.partitions),
                         "replicas": len(doc.partitions[0].replicas) if doc.partitions else 1,
                         "config": dict(doc.configs)}
            if name != doc.name:
                spec["topicName"] = doc.name
            body = {"apiVersion": API_VERSION, "kind": "Topic",
                    "metadata": {"name": name, "namespace": self.namespace,
                                 "labels": {naming.CLUSTER_LABEL: self.cluster,
                                            "app.kubernetes.io/managed-by": naming.MANAGED_BY},
                                 "annotations": {"dm.dev/created-through": "kafka-api"},
                                 "ownerReferences": [naming.owner_reference(self.cluster, self.cluster_uid)]},
                    "spec": spec}
            try:
                obj = await self.kube.create(self.topics_path, body)
            except ApiError as exc:
                if exc.status != 409:
                    raise
                existing = await self.kube.get(f"{self.topics_path}/{name}")
                if existing["spec"].get("cluster") == self.cluster and topic_name_of(existing) == doc.name:
                    obj = existing
                else:
                    taken = True
                    continue
            self.resources[doc.name] = name
            self.uids[name] = obj["metadata"]["uid"]
            self.resource_versions[name] = obj["metadata"]["resourceVersion"]
            log.info("%s/%s: Topic resource %s for topic %s", self.namespace, self.cluster, name, doc.name)
            return name
        raise ConflictError(f"no free Topic resource name for topic {doc.name}")

    async def delete_topic(self, name: str, expected_version: int) -> None:
        known = self.docs.get(name)
        current = known.version if known else -1
        if expected_version != current:
            raise ConflictError(f"topic {name} is at version {current}, not {expected_version}")
        self.docs.pop(name, None)
        resource = self.resources.pop(name, None)
        if resource is None:
            return
        uid = self.uids.pop(resource, None)
        self.resource_versions.pop(resource, None)
        obj = await self.kube.get_or_none(f"{self.topics_path}/{resource}")
        if obj is None or obj["metadata"].get("deletionTimestamp") or \
                uid not in (None, obj["metadata"]["uid"]):
            return  # deleted through Kubernetes (the topic goes because its resource went)
        # Deleted through the Kafka API: the resource goes too.
        await self.kube.delete(f"{self.topics_path}/{resource}")
