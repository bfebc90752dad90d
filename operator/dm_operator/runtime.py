"""One DMCluster at run time: its controller (state in the resources' status), and a level-based
reconcile loop — every few seconds and whenever a watched object changes — that brings its children,
rolling restarts, scale-down checks, Topics and status in line. The decisions themselves are the
pure functions of `manifests` and `planning`; this module does the I/O around them."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import secrets
import time
from typing import TYPE_CHECKING, Any

import urllib3
from dm_broker.config import BrokerConfig, ConfigError
from dm_broker.controller.controller import Controller, ControllerError
from dm_broker.controller.models import CreatePartitionsRequest, CreateTopicRequest, ReassignmentRequest, TopicDoc
from dm_broker.controller.rebalance import Move, PlanError
from dm_broker.tasks import stop_tasks

from . import API_VERSION, manifests, naming
from .changes import describe, isr_changes, leader_changes, offline, under_replicated
from .conditions import condition, merge_conditions
from .kube import ApiError, Kube, collection_path, object_path
from .metrics import (
    BROKERS,
    ELECTIONS,
    ERRORS,
    FENCES,
    ISR_CHANGES,
    OFFLINE,
    RECONCILE_SECONDS,
    RECONCILES,
    UNDER_REPLICATED,
)
from .models import BrokerStatus, DMClusterSpec, TopicSpec
from .planning import (
    BrokerPod,
    TopicRefusal,
    drain_moves,
    next_roll_step,
    plan_topic,
    reassigning,
    scale_down_blocker,
    scale_up_moves,
    topic_configs,
)
from .store import TOPIC_FINALIZER, CrdStatusStore, topic_name_of, wanted_topic_name

if TYPE_CHECKING:
    from .operator import Operator

log = logging.getLogger(__name__)
Obj = dict[str, Any]
APPLIED = "dm.dev/applied"


def camel(error: str) -> str:
    return "".join(part.capitalize() for part in error.split("_"))


def _hash(obj: Obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def pod_ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions", []))


class ClusterRuntime:
    def __init__(self, operator: Operator, namespace: str, name: str, uid: str) -> None:
        self.operator = operator
        self.kube: Kube = operator.kube
        self.settings = operator.settings
        self.namespace = namespace
        self.name = name
        self.uid = uid
        self.controller: Controller | None = None
        self._balanced_brokers: int | None = None  # the cluster size partitions were last spread over
        self.store: CrdStatusStore | None = None
        self.token = ""
        self.spec: DMClusterSpec | None = None
        self.wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_status: Obj | None = None
        self._topic_status: dict[str, Obj] = {}
        self._pdb_api: str | None = None
        self._events: set[asyncio.Task[None]] = set()
        self.labels = {"namespace": namespace, "cluster": name}

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @property
    def path(self) -> str:
        return f"/apis/{API_VERSION}/namespaces/{self.namespace}/dmclusters/{self.name}"

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"dmcluster-{self.namespace}-{self.name}")

    async def stop(self) -> None:
        await stop_tasks(self._task)
        if self.controller is not None:
            await self.controller.close()
        for state in ("live", "fenced"):
            BROKERS.labels(**self.labels, state=state).set(0)

    async def _run(self) -> None:
        backoff = 1.0
        while True:
            self.wake.clear()
            started = time.monotonic()
            try:
                if self.controller is None:
                    await self._start_controller()
                await self.reconcile()
                RECONCILES.labels(kind="DMCluster", result="ok").inc()
                backoff = 1.0
                delay = self.settings.reconcile_interval_s
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                RECONCILES.labels(kind="DMCluster", result="error").inc()
                ERRORS.labels(kind="DMCluster").inc()
                if isinstance(exc, ApiError) and exc.namespace_terminating:
                    # The cluster's namespace is being deleted: its deletion event follows.
                    log.info("%s/%s: reconcile stopped: %s", self.namespace, self.name, exc)
                else:
                    log.exception("%s/%s: reconcile failed", self.namespace, self.name)
                with contextlib.suppress(Exception):
                    await self._write_status({"conditions": merge_conditions(
                        (self._last_status or {}).get("conditions", []),
                        [condition("Ready", False, "ReconcileError", str(exc)[:500])])}, force=True)
                delay = backoff
                backoff = min(backoff * 2, 30.0)
            RECONCILE_SECONDS.observe(time.monotonic() - started)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), delay)

    async def _start_controller(self) -> None:
        obj = await self.kube.get(self.path)
        self.spec = DMClusterSpec.model_validate(obj.get("spec") or {})
        self.token = await self._ensure_token()
        store = CrdStatusStore(self.kube, self.namespace, self.name, self.uid)
        store.listeners.append(self._on_topic_change)
        try:
            config = BrokerConfig.build({k: str(v).lower() if isinstance(v, bool) else str(v)
                                         for k, v in self.spec.config.items()}, environ={})
        except ConfigError:
            config = BrokerConfig.build({}, environ={})
        # Without a cluster document in the status (a re-created DMCluster, a reinstall, a restore) the
        # controller recovers the topics from what the brokers hold; it knows how many to wait for.
        controller = await Controller.open(store, session_timeout_ms=config["broker.session.timeout.ms"],
                                           unclean_election_default=config["unclean.leader.election.enable"],
                                           rack_resolver=self._rack_of, expected_brokers=self.spec.replicas,
                                           recovery_timeout_ms=config["controller.recovery.timeout.ms"])
        controller.start()
        self.store, self.controller = store, controller
        log.info("%s/%s: controller running (%d topics from status)", self.namespace, self.name,
                 len(controller.topics))

    async def _ensure_token(self) -> str:
        """The per-cluster token brokers present to the controller (a Secret the operator owns)."""
        path = f"/api/v1/namespaces/{self.namespace}/secrets/{naming.token_secret(self.name)}"
        existing = await self.kube.get_or_none(path)
        if existing is None:
            body = manifests.token_secret(self.name, self.namespace, naming.owner_reference(self.name, self.uid),
                                          secrets.token_hex(32))
            try:
                await self.kube.create(collection_path("v1", "secrets", self.namespace), body)
            except ApiError as exc:
                if exc.status != 409:
                    raise
            existing = await self.kube.get(path)
        return base64.b64decode(existing["data"]["token"]).decode()

    # -- reconcile ---------------------------------------------------------------------------------

    async def reconcile(self) -> None:
        assert self.controller is not None and self.store is not None
        obj = await self.kube.get_or_none(self.path)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return  # being deleted: owned children go with it (garbage collection)
        generation = obj["metadata"].get("generation")
        spec = DMClusterSpec.model_validate(obj.get("spec") or {})
        self.spec = spec
        owner = naming.owner_reference(self.name, self.uid)
        conditions = []
        try:
            properties = manifests.render_config(spec.config)
            conditions.append(condition("ConfigValid", True, "Valid", "broker configuration is valid"))
            config_ok = True
        except ConfigError as exc:
            config_ok = False
            conditions.append(condition("ConfigValid", False, "InvalidConfig", str(exc)))
            properties = await self._applied_properties()
        ns = self.namespace
        await self._apply(manifests.service_account(self.name, ns, owner))
        await self._apply(manifests.headless_service(self.name, ns, owner))
        await self._apply(manifests.bootstrap_service(self.name, ns, owner))
        await self._apply(manifests.pod_disruption_budget(self.name, ns, owner, await self._pdb_version()))
        await self._apply(manifests.config_map(self.name, ns, owner, properties))

        topics = self.controller.topics
        sts_path = f"/apis/apps/v1/namespaces/{ns}/statefulsets/{naming.statefulset(self.name)}"
        current = await self.kube.get_or_none(sts_path)
        current_replicas = current["spec"]["replicas"] if current else 0
        replicas = spec.replicas
        blocked = None
        racks = self._live_racks()
        if current is not None and spec.replicas < current_replicas:
            blocked = scale_down_blocker(topics, current_replicas, spec.replicas)
            if blocked:
                replicas = current_replicas  # the brokers stay until they are drained
                reason, blocked = await self._drain(spec.replicas, racks)
        conditions.append(condition("ScaleDownBlocked", bool(blocked), reason if blocked else "None", blocked or ""))
        conditions.append(await self._rebalance_after_scale_up(obj, spec, racks))
        sts = manifests.statefulset(self.name, ns, owner, spec, self.settings, replicas=replicas,
                                    properties=properties)
        storage_note = await self._apply(sts, immutable=("spec", "volumeClaimTemplates"))
        target = sts["spec"]["template"]["metadata"]["annotations"]["dm.dev/revision"]

        pods = (await self.kube.get(collection_path("v1", "pods", ns),
                                    labelSelector=naming.selector_string(self.name))).get("items", [])
        by_id: dict[int, Obj] = {}
        for pod in pods:
            broker_id = naming.broker_id_of(pod["metadata"]["name"], self.name)
            if broker_id is not None:
                by_id[broker_id] = pod
        await self._forget_removed_brokers(replicas, by_id)
        await self._claims_ownership(spec.storage.deleteClaim)

        views = [BrokerPod(i, pod_ready(p), (p["metadata"].get("annotations") or {}).get("dm.dev/revision"),
                           bool(p["metadata"].get("deletionTimestamp"))) for i, p in by_id.items()]
        step = next_roll_step(target, views, replicas, topics, manifests.min_insync_default(spec.config))
        if step.restart is not None:
            await self._restart(step.restart, target)
        rolling = bool(step.outdated)
        message = (f"restarting broker {step.restart}" if step.restart is not None else step.wait or "") \
            if rolling else "every broker runs the current revision"
        conditions.append(condition("RollingRestart", rolling, "Restarting" if step.restart is not None else
                                    "Waiting" if rolling else "UpToDate", message))
        if storage_note:
            conditions.append(condition("StorageChangePending", True, "ImmutableVolumeClaimTemplate", storage_note))

        await self.controller.ensure_cluster_document()
        conditions.append(self._stray_condition())
        conditions.append(identity_condition(by_id))
        await self._reconcile_topics()
        self._publish_metrics()
        await self._write_cluster_status(generation, spec, replicas, by_id, conditions, config_ok, target)

    # -- moving partitions: drains before a scale-down, a rebalance after a scale-up --------------------

    def _live_racks(self) -> dict[int, str | None]:
        assert self.controller is not None
        return {b.node_id: b.rack for b in self.controller.brokers.values() if not b.fenced}

    async def _reassign(self, moves: list[Move], why: str) -> None:
        assert self.controller is not None
        if not moves:
            return
        results = await self.controller.alter_reassignments(
            [ReassignmentRequest(topic=m.topic, partition=m.partition, replicas=list(m.after)) for m in moves])
        failed = [r for r in results if r.error]
        for r in failed:
            log.warning("%s: reassignment of %s-%d refused: %s", self.name, r.topic, r.partition, r.message)
        self.event("PartitionsMoving", f"{why}: moving {len(moves) - len(failed)} partitions "
                                       f"({sum(m.copies for m in moves)} replica copies)")

    async def _drain(self, desired: int, racks: dict[int, str | None]) -> tuple[str, str]:
        """Moves the replicas off the brokers a scale-down removes; (reason, message) of the
        ScaleDownBlocked condition while they still hold some."""
        assert self.controller is not None
        moving = reassigning(self.controller.topics)
        if moving:
            return "DrainingBrokers", (f"moving {len(moving)} partitions before brokers {desired} and above are "
                                       "removed")
        try:
            moves = drain_moves(self.controller.topics, racks, desired)
        except PlanError as exc:
            return "BrokersHoldReplicas", f"cannot move the replicas off brokers {desired} and above: {exc}"
        await self._reassign(moves, f"scale-down to {desired} brokers")
        return "DrainingBrokers", f"moving {len(moves)} partitions before brokers {desired} and above are removed"

    async def _rebalance_after_scale_up(self, obj: Obj, spec: DMClusterSpec, racks: dict[int, str | None]) -> Obj:
        """Once every broker of a grown cluster is registered, existing partitions are spread onto
        the new ones (once per size: status.balancedBrokers remembers it across operator restarts)."""
        assert self.controller is not None
        balanced = (obj.get("status") or {}).get("balancedBrokers")
        balanced = self._balanced_brokers if self._balanced_brokers is not None else balanced
        all_up = all(b in racks for b in range(spec.replicas))
        moving = reassigning(self.controller.topics)
        if moving:
            return condition("Rebalancing", True, "PartitionsMoving", f"{len(moving)} partitions are being moved")
        if all_up and balanced is None:
            self._balanced_brokers = spec.replicas  # a new cluster (or operator): its placement is the baseline
        elif all_up and balanced < spec.replicas:
            moves = scale_up_moves(self.controller.topics, {b: r for b, r in racks.items() if b < spec.replicas})
            await self._reassign(moves, f"scale-up to {spec.replicas} brokers")
            self._balanced_brokers = spec.replicas
            if moves:
                return condition("Rebalancing", True, "PartitionsMoving", f"spreading {len(moves)} partitions "
                                                                         f"onto the new brokers")
        elif all_up:
            self._balanced_brokers = min(balanced, spec.replicas)
        return condition("Rebalancing", False, "Balanced", "no partition is being moved")

    async def _applied_properties(self) -> str:
        cm = await self.kube.get_or_none(f"/api/v1/namespaces/{self.namespace}/configmaps/"
                                         f"{naming.config_map(self.name)}")
        return (cm or {}).get("data", {}).get("broker.properties", "")

    async def _pdb_version(self) -> str:
        if self._pdb_api is None:
            # policy/v1 from Kubernetes 1.21 on; older servers only have policy/v1beta1.
            self._pdb_api = "policy/v1" if await self.kube.served("policy/v1") else "policy/v1beta1"
        return self._pdb_api

    async def _apply(self, desired: Obj, immutable: tuple[str, str] | None = None) -> str | None:
        """Creates or updates a child when it differs from what was last applied (a hash in an
        annotation). Returns a note when an immutable part could not be changed."""
        digest = _hash(desired)
        desired["metadata"].setdefault("annotations", {})[APPLIED] = digest
        path = object_path(desired)
        current = await self.kube.get_or_none(path)
        if current is None:
            await self.kube.create(path.rsplit("/", 1)[0], desired)
            return None
        if (current["metadata"].get("annotations") or {}).get(APPLIED) == digest:
            return None
        try:
            await self.kube.patch(path, desired)
            return None
        except ApiError as exc:
            if exc.status != 422 or immutable is None:
                raise
            section, field = immutable
            patch = json.loads(json.dumps(desired))
            patch[section].pop(field, None)
            await self.kube.patch(path, patch)
            return f"{desired['kind']} {field} cannot change in place (e.g. storage size or class): {exc}"

    async def _restart(self, broker_id: int, target: str) -> None:
        """Deletes the broker's pod: SIGTERM, a controlled shutdown, then the StatefulSet recreates it
        with the current template."""
        pod = naming.pod(self.name, broker_id)
        log.info("%s/%s: rolling restart of broker %d to revision %s", self.namespace, self.name, broker_id, target)
        self.event("RollingRestart", f"restarting broker {broker_id} (pod {pod}) for revision {target}")
        await self.kube.delete(f"/api/v1/namespaces/{self.namespace}/pods/{pod}")

    async def _forget_removed_brokers(self, replicas: int, by_id: dict[int, Obj]) -> None:
        assert self.controller is not None
        for broker_id in [b for b in self.controller.brokers if b >= replicas and b not in by_id]:
            try:
                await self.controller.unregister(broker_id)
                self.event("BrokerRemoved", f"broker {broker_id} left the cluster")
            except ControllerError as exc:
                log.warning("%s/%s: %s", self.namespace, self.name, exc.message)

    def _stray_condition(self) -> Obj:
        """Logs brokers kept aside because no recorded decision allows deleting them (ADR 0017)."""
        assert self.controller is not None
        strays = {b.node_id: b.stray_logs for b in self.controller.brokers.values() if b.stray_logs}
        if not strays:
            return condition("StrayData", False, "None", "no broker holds stray logs")
        listed = "; ".join(f"broker {b}: {', '.join(names)}" for b, names in sorted(strays.items()))
        return condition("StrayData", True, "StrayLogsKept",
                         f"logs kept aside, not deleted (inspect, then `kubectl exec <broker pod> -- dm strays "
                         f"delete <name> --data-dir {naming.DATA_PATH}`): {listed}"[:1000])

    async def _claims_ownership(self, delete_with_cluster: bool) -> None:
        """PVCs of a StatefulSet outlive it; owned by the DMCluster they are deleted with it. Only this
        cluster's broker claims (the full broker selector and the StatefulSet's claim names): another
        release of the same name, or anything else labelled with it, is never adopted."""
        claims = (await self.kube.get(collection_path("v1", "persistentvolumeclaims", self.namespace),
                                      labelSelector=naming.selector_string(self.name))).get("items", [])
        prefix = f"data-{naming.statefulset(self.name)}-"
        for claim in claims:
            if not claim["metadata"]["name"].startswith(prefix) or \
                    not claim["metadata"]["name"].removeprefix(prefix).isdigit():
                continue
            refs = claim["metadata"].get("ownerReferences") or []
            owned = any(r.get("uid") == self.uid for r in refs)
            if owned == delete_with_cluster:
                continue
            others = [r for r in refs if r.get("uid") != self.uid]
            new = [*others, {**naming.owner_reference(self.name, self.uid), "controller": False}] \
                if delete_with_cluster else others
            await self.kube.patch(f"{collection_path('v1', 'persistentvolumeclaims', self.namespace)}/"
                                  f"{claim['metadata']['name']}",
                                  {"metadata": {"ownerReferences": new,
                                                "resourceVersion": claim["metadata"]["resourceVersion"]}})

    # -- status ------------------------------------------------------------------------------------

    async def _write_cluster_status(self, generation: int | None, spec: DMClusterSpec, replicas: int,
                                    by_id: dict[int, Obj], conditions: list[Obj], config_ok: bool, target: str) -> None:
        assert self.controller is not None
        brokers = []
        ready_count = 0
        for broker_id in sorted(set(range(replicas)) | set(by_id)):
            pod = by_id.get(broker_id)
            info = self.controller.brokers.get(broker_id)
            ready = bool(pod) and pod_ready(pod)
            ready_count += ready
            brokers.append(BrokerStatus(id=broker_id, pod=naming.pod(self.name, broker_id), ready=ready,
                                        fenced=bool(info and info.fenced), registered=info is not None,
                                        strayLogs=list(info.stray_logs) if info else [],
                                        rack=info.rack if info else None,
                                        node=(pod or {}).get("spec", {}).get("nodeName")).model_dump())
        serving = [b for b in brokers if b["id"] < spec.replicas and b["ready"] and b["registered"] and not b["fenced"]]
        if not config_ok:
            ready = condition("Ready", False, "InvalidConfig", "the broker configuration is invalid: see ConfigValid")
        elif len(serving) < spec.replicas:
            ready = condition("Ready", False, "BrokersNotReady", f"{len(serving)}/{spec.replicas} brokers ready")
        else:
            ready = condition("Ready", True, "AllBrokersReady", f"{len(serving)}/{spec.replicas} brokers ready")
        previous = (self._last_status or {}).get("conditions", [])
        status = {
            "observedGeneration": generation, "conditions": merge_conditions(previous, [ready, *conditions],
                                                                             generation),
            "bootstrap": manifests.bootstrap_address(self.name, self.namespace, self.settings.cluster_domain),
            "replicas": len(by_id), "readyReplicas": ready_count, "desiredReplicas": spec.replicas,
            "selector": naming.selector_string(self.name), "brokers": brokers, "revision": target,
            "balancedBrokers": self._balanced_brokers,
        }
        self._announce_transitions(previous, status["conditions"])
        await self._write_status(status)

    async def _write_status(self, status: Obj, force: bool = False) -> None:
        if not force and status == self._last_status:
            return
        await self.kube.patch(f"{self.path}/status", {"status": status})
        self._last_status = {**(self._last_status or {}), **status}

    def _announce_transitions(self, before: list[Obj], after: list[Obj]) -> None:
        old = {c["type"]: c for c in before}
        for c in after:
            prev = old.get(c["type"])
            if prev is not None and prev["status"] == c["status"] and prev.get("reason") == c.get("reason"):
                continue
            if c["type"] == "ScaleDownBlocked" and c["status"] == "True":
                self.event("ScaleDownBlocked", c["message"], "Warning")
            elif c["type"] == "ConfigValid" and c["status"] == "False":
                self.event("InvalidConfig", c["message"], "Warning")
            elif c["type"] == "StrayData" and c["status"] == "True":
                self.event("StrayLogsKept", c["message"], "Warning")
            elif c["type"] == "Ready" and (prev is not None or c["status"] == "True"):
                self.event(c["reason"], c["message"], "Normal" if c["status"] == "True" else "Warning")

    def _publish_metrics(self) -> None:
        assert self.controller is not None
        topics = self.controller.topics.values()
        OFFLINE.labels(**self.labels).set(sum(offline(t) for t in topics))
        UNDER_REPLICATED.labels(**self.labels).set(sum(under_replicated(t) for t in topics))
        fenced = sum(1 for b in self.controller.brokers.values() if b.fenced)
        BROKERS.labels(**self.labels, state="fenced").set(fenced)
        BROKERS.labels(**self.labels, state="live").set(len(self.controller.brokers) - fenced)

    # -- topics ------------------------------------------------------------------------------------

    async def _reconcile_topics(self) -> None:
        assert self.store is not None
        for obj in await self.store.list_topic_resources():
            try:
                await self.reconcile_topic(obj)
                RECONCILES.labels(kind="Topic", result="ok").inc()
            except Exception:
                RECONCILES.labels(kind="Topic", result="error").inc()
                ERRORS.labels(kind="Topic").inc()
                log.exception("%s: Topic %s failed", self.namespace, obj["metadata"]["name"])

    async def reconcile_topic(self, obj: Obj) -> None:
        assert self.controller is not None and self.store is not None
        meta = obj["metadata"]
        resource = meta["name"]
        topic = topic_name_of(obj)
        path = f"{self.store.topics_path}/{resource}"
        finalizers = meta.get("finalizers") or []
        self.store.remember(obj)
        owner = self.store.resources.get(topic)
        if meta.get("deletionTimestamp"):
            if TOPIC_FINALIZER not in finalizers:
                return
            if owner == resource and topic in self.controller.topics:
                try:
                    await self.controller.delete_topic(topic)
                    self.event("TopicDeleted", f"topic {topic} deleted with its Topic resource {resource}")
                except ControllerError as exc:
                    log.warning("%s/%s: %s (releasing the Topic resource anyway)", self.namespace, resource,
                                exc.message)
            self.store.resources.pop(topic, None) if owner == resource else None
            await release_finalizer(self.kube, path, obj)
            return
        if TOPIC_FINALIZER not in finalizers:
            obj = await self.kube.patch(path, {"metadata": {"finalizers": [*finalizers, TOPIC_FINALIZER],
                                                            "resourceVersion": meta["resourceVersion"]}})
        generation = obj["metadata"].get("generation")
        status = obj.get("status") or {}
        conditions: list[Obj]
        changed = immutable_change(obj)
        if owner != resource:
            conditions = [condition("Ready", False, "ResourceConflict",
                                    f"topic {topic} is already managed by Topic {owner}")]
        elif changed:
            # The resource keeps managing its topic; following the edit would leave that topic without a
            # resource (and a later operator could drop it from the metadata).
            conditions = [condition("Ready", False, "ImmutableFieldChanged", changed)]
        else:
            conditions = [await self._apply_topic(obj, topic, generation, status)]
        new_status = {"observedGeneration": generation,
                      "conditions": merge_conditions(status.get("conditions", []), conditions, generation)}
        if {k: status.get(k) for k in new_status} != new_status:
            with contextlib.suppress(ApiError):
                await self.kube.patch(f"{path}/status", {"status": new_status})

    async def _apply_topic(self, obj: Obj, topic: str, generation: int | None, status: Obj) -> Obj:
        """Brings the topic to its spec when the spec changed (or was never applied); changes made
        through the Kafka API since are not reverted. Returns the Ready condition."""
        assert self.controller is not None
        ready = next((c for c in status.get("conditions", []) if c.get("type") == "Ready"), None)
        applied = bool(ready and ready.get("status") == "True" and ready.get("observedGeneration") == generation)
        current = self.controller.topics.get(topic)
        try:
            spec = TopicSpec.model_validate(obj.get("spec") or {})
            if current is None or not applied:
                configs = topic_configs(spec.config)
                plan = plan_topic(spec.partitions, spec.replicas, configs, current, self._live_racks())
                if plan.create:
                    current = await self.controller.create_topic(CreateTopicRequest(
                        name=topic, partitions=spec.partitions, replication_factor=spec.replicas, configs=configs,
                        internal=topic.startswith("__")))
                    self.event("TopicCreated", f"topic {topic}: {spec.partitions} partitions, replication factor "
                                               f"{spec.replicas}")
                if plan.add_partitions_to is not None:
                    current = await self.controller.create_partitions(
                        topic, CreatePartitionsRequest(count=plan.add_partitions_to))
                if plan.configs is not None:
                    current = await self.controller.alter_configs(topic, plan.configs)
                if plan.reassign:
                    results = await self.controller.alter_reassignments([
                        ReassignmentRequest(topic=topic, partition=i, replicas=r) for i, r in plan.reassign.items()])
                    refused = [r.message for r in results if r.error]
                    if refused:
                        return condition("Ready", False, "ReassignmentRefused", "; ".join(refused)[:500])
                    self.event("ReplicationFactorChanging", f"topic {topic}: replication factor to {spec.replicas}")
                    current = self.controller.topics.get(topic, current)
        except TopicRefusal as refusal:
            return condition("Ready", False, refusal.reason, refusal.message)
        except ControllerError as exc:
            return condition("Ready", False, camel(exc.error), exc.message)
        except ValueError as exc:
            return condition("Ready", False, "InvalidSpec", str(exc)[:500])
        assert current is not None
        recovering = [i for i, p in enumerate(current.partitions) if p.recovering]
        if recovering:
            waiting = sorted({r for p in current.partitions if p.recovering for r in p.replicas}
                             - {b for b in self.controller.reports.held})
            return condition("Ready", False, "Recovering", f"{len(recovering)} partitions are being recovered from "
                                                           f"the brokers' logs; waiting for brokers {waiting} to "
                                                           "report (or an unclean election)")
        moving = [i for i, p in enumerate(current.partitions) if p.reassigning]
        if moving:
            return condition("Ready", False, "Reassigning", f"{len(moving)} partitions are moving (replicas being "
                                                            "added or removed)")
        down = offline(current)
        if down:
            return condition("Ready", False, "PartitionsOffline", f"{down} of {len(current.partitions)} partitions "
                                                                  "have no leader")
        return condition("Ready", True, "InSync", f"{len(current.partitions)} partitions, replication factor "
                                                  f"{len(current.partitions[0].replicas)}")

    def _on_topic_change(self, old: TopicDoc | None, new: TopicDoc, obj: Obj) -> None:
        """After a topic document was persisted: an Event on the Topic per leader change, metrics."""
        changes = leader_changes(old, new) if old is not None else []  # a new topic: TopicCreated says it
        if changes:
            ELECTIONS.labels(**self.labels).inc(len(changes))
            involved = {"apiVersion": API_VERSION, "kind": "Topic", "name": obj["metadata"]["name"],
                        "namespace": self.namespace, "uid": obj["metadata"]["uid"]}
            for change in changes:
                kind = "Warning" if change.new < 0 else "Normal"
                reason = "PartitionOffline" if change.new < 0 else "LeaderElected"
                self.event(reason, f"{new.name} {describe(change)}", kind, involved)
        ISR_CHANGES.labels(**self.labels).inc(isr_changes(old, new))

    # -- broker facts from Kubernetes ----------------------------------------------------------------

    async def _rack_of(self, broker_id: int, sent: str | None) -> str | None:
        """With rack awareness on, a broker's rack is its node's label (the broker cannot read it)."""
        spec = self.spec
        if spec is None or spec.rack is None:
            return sent
        pod = await self.kube.get_or_none(f"/api/v1/namespaces/{self.namespace}/pods/"
                                          f"{naming.pod(self.name, broker_id)}")
        node_name = (pod or {}).get("spec", {}).get("nodeName")
        if not node_name:
            return sent
        try:
            node = await self.kube.get(f"/api/v1/nodes/{node_name}")
        except ApiError as exc:
            log.warning("%s/%s: cannot read node %s for broker %d's rack: %s", self.namespace, self.name,
                        node_name, broker_id, exc)
            return sent
        return (node["metadata"].get("labels") or {}).get(spec.rack.topologyKey, sent)

    async def on_pod_event(self, event_type: str, pod: Obj) -> None:
        """Fast fencing: a broker whose pod is gone, or whose container has terminated, and which
        holds no session to the controller, is fenced at once."""
        self.wake.set()
        controller = self.controller
        broker_id = naming.broker_id_of(pod["metadata"]["name"], self.name)
        if controller is None or broker_id is None or controller.has_session(broker_id):
            return
        reason = None
        if event_type == "DELETED":
            reason = "its pod was deleted"
        else:
            for status in (pod.get("status") or {}).get("containerStatuses", []):
                if status.get("name") == "broker" and "terminated" in (status.get("state") or {}):
                    reason = "its container terminated"
        if reason and await controller.fence(broker_id, reason):
            FENCES.labels(**self.labels).inc()

    # -- events ------------------------------------------------------------------------------------

    def event(self, reason: str, message: str, kind: str = "Normal", involved: Obj | None = None) -> None:
        """A Kubernetes Event on the DMCluster (or `involved`), sent without waiting for it."""
        task = asyncio.create_task(post_event(self.kube, self.namespace, involved or {
            "apiVersion": API_VERSION, "kind": "DMCluster", "name": self.name, "namespace": self.namespace,
            "uid": self.uid}, reason, message, kind))
        self._events.add(task)
        task.add_done_callback(self._events.discard)


def identity_condition(pods: dict[int, Obj]) -> Obj:
    """Brokers that refused to start because their volume belongs to another cluster (their last
    termination message says so)."""
    refused = []
    for broker_id, pod in sorted(pods.items()):
        for status in (pod.get("status") or {}).get("containerStatuses", []):
            message = ((status.get("lastState") or {}).get("terminated") or {}).get("message") or ""
            if status.get("name") == "broker" and "INCONSISTENT_CLUSTER_ID" in message:
                line = next((m for m in message.splitlines() if "INCONSISTENT_CLUSTER_ID" in m), message)
                refused.append(f"broker {broker_id}: {line.strip()}")
    if refused:
        return condition("ClusterIdentity", False, "InconsistentClusterId", "; ".join(refused)[:1000])
    return condition("ClusterIdentity", True, "Consistent", "every broker's volume belongs to this cluster")


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


async def release_finalizer(kube: Kube, path: str, obj: Obj) -> None:
    meta = obj["metadata"]
    remaining = [f for f in meta.get("finalizers") or [] if f != TOPIC_FINALIZER]
    with contextlib.suppress(ApiError):
        await kube.patch(path, {"metadata": {"finalizers": remaining, "resourceVersion": meta["resourceVersion"]}})


async def post_event(kube: Kube, namespace: str, involved: Obj, reason: str, message: str, kind: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    body = {"apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{involved['name']}.", "namespace": namespace},
            "involvedObject": involved, "reason": reason, "message": message[:1000], "type": kind,
            "source": {"component": "dm-operator"}, "reportingComponent": "dm-operator",
            "reportingInstance": "dm-operator", "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1}
    # Best effort, as Kubernetes' own event recorders: a timeout (urllib3's errors are not
    # OSErrors) drops the event.
    with contextlib.suppress(ApiError, OSError, RuntimeError, urllib3.exceptions.HTTPError):
        await kube.create(collection_path("v1", "events", namespace), body, best_effort=True)
