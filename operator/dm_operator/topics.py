"""Topic resources: each brought to its spec through the cluster's controller (created, partitions
added, configs and replication factor changed), with a Ready condition that says why not; deleting
the resource deletes the topic, unless its DMCluster, namespace or CRD is being deleted with it. There is
no finalizer (ADR 0061): the deletion is observed, so nothing ever waits on the operator; finalizers
earlier versions put on Topics are taken off.

What a Topic may not become: it manages one topic of one cluster for good (its status records both).
A later change of spec.topicName or spec.cluster is refused with a condition, and the topic stays
managed — following the edit would leave the old topic without a resource."""

from __future__ import annotations

import contextlib
import fnmatch
import logging
from collections.abc import Awaitable, Callable

from dm_broker.controller.controller import Controller, ControllerError
from dm_broker.controller.models import CreatePartitionsRequest, CreateTopicRequest, ReassignmentRequest, TopicDoc

from . import API_VERSION, GROUP, VERSION, deletions, finalizers
from .cache import ObjectCache
from .changes import isr_changes, leader_changes, leader_events, offline
from .conditions import condition, merge_conditions
from .events import EventRecorder, reference
from .kube import ApiError, Kube
from .metrics import ELECTIONS, ERRORS, ISR_CHANGES, RECONCILES
from .models import TopicSpec, known_part
from .objects import Obj, being_deleted
from .planning import TopicRefusal, plan_topic, topic_configs
from .store import TOPIC_FINALIZER, CrdStatusStore, cluster_of, topic_name_of, wanted_topic_name
from .users import release_orphans as release_orphan_users

log = logging.getLogger(__name__)


def camel(error: str) -> str:
    return "".join(part.capitalize() for part in error.split("_"))


def topics_path(namespace: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/topics"


async def list_topics(cache: ObjectCache, namespace: str) -> list[Obj]:
    return await cache.list(API_VERSION, "Topic", "topics", namespace)


def immutable_change(obj: Obj) -> str | None:
    """What makes a Topic resource's edit unacceptable: spec.topicName or spec.cluster changed after
    it got its topic (its status records both)."""
    status = obj.get("status") or {}
    if status.get("topicName") and wanted_topic_name(obj) != status["topicName"]:
        return (f"this resource manages topic {status['topicName']!r}: its name cannot change to "
                f"{wanted_topic_name(obj)!r} (restore spec.topicName; create another Topic for another topic)")
    if status.get("cluster") and obj.get("spec", {}).get("cluster") != status["cluster"]:
        return (f"this resource manages a topic of DMCluster {status['cluster']!r}: spec.cluster cannot change to "
                f"{obj['spec'].get('cluster')!r} (restore it; create another Topic for the other cluster)")
    return None


async def release_finalizer(kube: Kube, path: str, obj: Obj, cache: ObjectCache | None = None) -> None:
    await finalizers.remove(kube, path, obj, TOPIC_FINALIZER, cache)


class TopicReconciler:
    """The Topic resources of one DMCluster, reconciled against its controller."""

    def __init__(self, kube: Kube, cache: ObjectCache, controller: Controller, store: CrdStatusStore,
                 recorder: EventRecorder, namespace: str, cluster: str) -> None:
        self.kube = kube
        self.cache = cache
        self.controller = controller
        self.store = store
        self.recorder = recorder
        self.namespace = namespace
        self.cluster = cluster
        self.labels = {"namespace": namespace, "cluster": cluster}
        # Called before the reassignments of a replication factor change (the operator's throttle).
        self.before_moves: Callable[[], Awaitable[None]] | None = None
        store.listeners.append(self.on_topic_change)

    def _live_racks(self) -> dict[int, str | None]:
        return {b.node_id: b.rack for b in self.controller.brokers.values() if not b.fenced}

    async def reconcile_all(self) -> None:
        listed = [obj for obj in await list_topics(self.cache, self.namespace) if cluster_of(obj) == self.cluster]
        try:
            await self._deleted_resources(listed)
        except (ApiError, ControllerError) as exc:
            log.warning("%s/%s: deleted Topics wait for the next pass: %s", self.namespace, self.cluster, exc)
        for obj in listed:
            try:
                await self.reconcile(obj)
                RECONCILES.labels(kind="Topic", result="ok").inc()
            except Exception:
                RECONCILES.labels(kind="Topic", result="error").inc()
                ERRORS.labels(kind="Topic").inc()
                log.exception("%s: Topic %s failed", self.namespace, obj["metadata"]["name"])

    async def reconcile(self, obj: Obj) -> None:
        meta = obj["metadata"]
        resource = meta["name"]
        topic = topic_name_of(obj)
        path = f"{topics_path(self.namespace)}/{resource}"
        if TOPIC_FINALIZER in (meta.get("finalizers") or []):
            # An earlier version's finalizer; a deletion it held was handled by _deleted_resources.
            await release_finalizer(self.kube, path, obj, self.cache)
            return  # its next event (or pass) reconciles it
        if being_deleted(obj):
            return  # someone else's finalizer holds it: the topic's fate was decided when it was deleted
        self.store.remember(obj)
        owner = self.store.resources.get(topic)
        generation = obj["metadata"].get("generation")
        status = obj.get("status") or {}
        changed = immutable_change(obj)
        if owner != resource:
            conditions = [condition("Ready", False, "ResourceConflict",
                                    f"topic {topic} is already managed by Topic {owner}")]
        elif changed:
            conditions = [condition("Ready", False, "ImmutableFieldChanged", changed)]
        else:
            conditions = [await self._apply(obj, topic, generation, status)]
        new_status = {"observedGeneration": generation,
                      "conditions": merge_conditions(status.get("conditions", []), conditions, generation)}
        if {k: status.get(k) for k in new_status} != new_status:
            with contextlib.suppress(ApiError):
                written = await self.kube.patch(f"{path}/status", {"status": new_status})
                self.cache.observe(written)
                # The store's next compare-and-set starts from this version, not a 409.
                self.store.resource_versions[resource] = written["metadata"]["resourceVersion"]

    async def _deleted_resources(self, listed: list[Obj]) -> None:
        """Topics whose resource is gone — deleted, or deleted and created again (another UID) — are
        deleted, when that was a decision about the Topic alone (ADR 0061). The watch cache tells which
        may be gone; the API server confirms it before anything is deleted."""
        live = {o["metadata"]["name"]: o["metadata"]["uid"] for o in listed if not being_deleted(o)}
        for topic, resource in list(self.store.resources.items()):
            uid = self.store.uids.get(resource)
            if uid is None or live.get(resource) == uid:
                continue
            if not await deletions.gone(self.kube, f"{topics_path(self.namespace)}/{resource}", uid,
                                        lambda obj: cluster_of(obj) == self.cluster):
                continue
            wider = await deletions.wider_deletion(self.kube, self.namespace, self.store.cluster_path, "topics")
            await self._resource_deleted(topic, resource, wider)

    async def _resource_deleted(self, topic: str, resource: str, wider: str | None) -> None:
        doc = self.controller.topics.get(topic)
        if doc is None:
            self.store.forget(topic)  # its topic was never created, or is already deleted
            return
        if wider is not None:
            self.store.forget(topic)
            message = f"topic {topic} is kept although its Topic resource {resource} was deleted: {wider}"
            log.info("%s/%s: %s", self.namespace, self.cluster, message)
            self.recorder.record("TopicKept", message)
            return
        try:
            await self.controller.delete_topic(topic)
        except ControllerError as exc:
            if exc.error != "invalid_request":
                raise  # not now (no controller quorum, a conflict): the next pass tries again
            # A topic that cannot be deleted (an internal one) keeps a resource: its metadata lives there.
            created = await self.store.recreate_resource(doc)
            self.recorder.record("TopicResourceRecreated", f"Topic resource {resource} was deleted, but {exc.message}:"
                                                           f" its metadata is in Topic {created} again", "Warning")
            return
        log.info("%s/%s: topic %s deleted with its Topic resource %s", self.namespace, self.cluster, topic, resource)
        self.recorder.record("TopicDeleted", f"topic {topic} deleted with its Topic resource {resource}")

    async def _apply(self, obj: Obj, topic: str, generation: int | None, status: Obj) -> Obj:
        """Brings the topic to its spec when the spec changed (or was never applied); changes made
        through the Kafka API since are not reverted. Returns the Ready condition."""
        controller = self.controller
        ready = next((c for c in status.get("conditions", []) if c.get("type") == "Ready"), None)
        applied = bool(ready and ready.get("status") == "True" and ready.get("observedGeneration") == generation)
        current = controller.topics.get(topic)
        try:
            spec = TopicSpec.model_validate(known_part(TopicSpec, obj.get("spec") or {})[0])
            if current is None or not applied:
                configs = topic_configs(spec.config)
                plan = plan_topic(spec.partitions, spec.replicas, configs, current, self._live_racks())
                if plan.create:
                    current = await controller.create_topic(CreateTopicRequest(
                        name=topic, partitions=spec.partitions, replication_factor=spec.replicas, configs=configs,
                        internal=topic.startswith("__")))
                    self.recorder.record("TopicCreated", f"topic {topic}: {spec.partitions} partitions, replication "
                                                         f"factor {spec.replicas}")
                if plan.add_partitions_to is not None:
                    current = await controller.create_partitions(topic,
                                                                 CreatePartitionsRequest(count=plan.add_partitions_to))
                if plan.configs is not None:
                    current = await controller.alter_configs(topic, plan.configs)
                if plan.reassign:
                    if self.before_moves is not None:
                        await self.before_moves()
                    results = await controller.alter_reassignments([
                        ReassignmentRequest(topic=topic, partition=i, replicas=r) for i, r in plan.reassign.items()])
                    refused = [r.message for r in results if r.error]
                    if refused:
                        return condition("Ready", False, "ReassignmentRefused", "; ".join(refused)[:500])
                    self.recorder.record("ReplicationFactorChanging",
                                         f"topic {topic}: replication factor to {spec.replicas}")
                    current = controller.topics.get(topic, current)
        except TopicRefusal as refusal:
            return condition("Ready", False, refusal.reason, refusal.message)
        except ControllerError as exc:
            return condition("Ready", False, camel(exc.error), exc.message)
        except ValueError as exc:
            return condition("Ready", False, "InvalidSpec", str(exc)[:500])
        assert current is not None
        return readiness(current, set(controller.reports.held))

    def on_topic_change(self, old: TopicDoc | None, new: TopicDoc, obj: Obj) -> None:
        """After a topic document was persisted: an Event on the Topic per leader change, metrics,
        and the cache learns the Topic's new status."""
        self.cache.observe({"apiVersion": API_VERSION, "kind": "Topic", **obj})
        changes = leader_changes(old, new) if old is not None else []  # a new topic: TopicCreated says it
        if changes:
            ELECTIONS.labels(**self.labels).inc(len(changes))
            involved = reference({"apiVersion": API_VERSION, "kind": "Topic", **obj})
            for reason, message, kind in leader_events(new.name, changes):
                self.recorder.record(reason, message, kind, involved)
        ISR_CHANGES.labels(**self.labels).inc(isr_changes(old, new))


def readiness(doc: TopicDoc, reported: set[int]) -> Obj:
    """A topic's Ready condition from its document."""
    recovering = [i for i, p in enumerate(doc.partitions) if p.recovering]
    if recovering:
        waiting = sorted({r for p in doc.partitions if p.recovering for r in p.replicas} - reported)
        return condition("Ready", False, "Recovering", f"{len(recovering)} partitions are being recovered from "
                                                       f"the brokers' logs; waiting for brokers {waiting} to "
                                                       "report (or an unclean election)")
    moving = [i for i, p in enumerate(doc.partitions) if p.reassigning]
    if moving:
        return condition("Ready", False, "Reassigning", f"{len(moving)} partitions are moving (replicas being "
                                                        "added or removed)")
    down = offline(doc)
    if down:
        return condition("Ready", False, "PartitionsOffline", f"{down} of {len(doc.partitions)} partitions "
                                                              "have no leader")
    return condition("Ready", True, "InSync", f"{len(doc.partitions)} partitions, replication factor "
                                              f"{len(doc.partitions[0].replicas)}")


# -- Topics of clusters this operator does not run ------------------------------------------------


async def orphan_topic(kube: Kube, namespace: str, obj: Obj, dmcluster: Obj | None) -> None:
    """A Topic whose DMCluster does not exist or is being deleted: the status says why nothing happens
    (and an earlier version's finalizer comes off: there is no Kafka topic to delete)."""
    name = obj["metadata"]["name"]
    path = f"{topics_path(namespace)}/{name}"
    cluster = cluster_of(obj)
    if TOPIC_FINALIZER in (obj["metadata"].get("finalizers") or []):
        await release_finalizer(kube, path, obj)
    if being_deleted(obj):
        return
    status = obj.get("status") or {}
    reason = "ClusterNotFound" if dmcluster is None else "ClusterDeleting"
    message = f"DMCluster {cluster!r} does not exist in namespace {namespace}" if dmcluster is None else \
        f"DMCluster {cluster!r} is being deleted"
    conditions = merge_conditions(status.get("conditions", []), [condition("Ready", False, reason, message)],
                                  obj["metadata"].get("generation"))
    if [c.get("reason") for c in status.get("conditions", [])] != [reason]:
        try:
            await kube.patch(f"{path}/status", {"status": {"conditions": conditions,
                                                           "observedGeneration": obj["metadata"].get("generation")}})
        except ApiError as exc:
            log.warning("%s/%s: %s", namespace, name, exc)


async def release_orphans(kube: Kube, namespace: str, cluster: str | None = None) -> int:
    """Releases the finalizers earlier versions put on Topics whose cluster is gone (`cluster`), or on
    every Topic in a namespace being deleted; returns how many."""
    return await finalizers.release_all(kube, topics_path(namespace), TOPIC_FINALIZER, cluster_of, cluster)


def served(namespace: str, patterns: list[str]) -> bool:
    """Whether the operator serves `namespace`: every one without patterns, else one a glob names and
    no `!glob` excludes (kopf's namespace patterns)."""
    if not patterns:
        return True
    globs = [g.strip() for p in patterns for g in p.split(",") if g.strip()]
    excluded = any(fnmatch.fnmatchcase(namespace, g[1:]) for g in globs if g.startswith("!"))
    return not excluded and any(fnmatch.fnmatchcase(namespace, g) for g in globs if not g.startswith("!"))


async def release_in_terminating_namespaces(kube: Kube, patterns: list[str] | None = None) -> None:
    """A namespace being deleted takes its DMClusters with it: nothing is left to clean up in Kafka, so
    Topics and Users that still carry an earlier version's finalizer must not wait for an operator. Run
    at shutdown and at start-up: kopf does not watch a namespace that is already terminating with
    finalizers left, so no event would ever reach them."""
    try:
        listing = await kube.get("/api/v1/namespaces")
    except ApiError:
        return
    for ns in (n["metadata"]["name"] for n in listing.get("items", [])
               if n.get("status", {}).get("phase") == "Terminating"):
        if not served(ns, patterns or []):
            continue
        try:
            count = await release_orphans(kube, ns)
            users = await release_orphan_users(kube, ns)
        except ApiError:
            continue  # not a namespace this operator may touch
        if count or users:
            log.info("%s is being deleted: released %d Topic and %d User finalizers", ns, count, users)
