"""One DMCluster at run time: its controller (state in the resources' status) and a level-based
reconcile loop that brings the cluster in line with its spec — children, scale-down drains and
scale-up spreading, rolling restarts, Topics, status — whenever something it watches changes
(debounced: a burst of changes is one pass), and every few seconds besides.

A pass reads what it needs from the watch cache, so one that finds nothing to change costs no API
call; the controller's settings follow spec.config at every pass. The decisions are the pure functions
of `manifests` and `planning`; the concerns' I/O lives in `children`, `moves`, `restarts`, `topics`,
`status` and `fencing`; this module orders them."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time

from dm_broker.config import BrokerConfig, ConfigError
from dm_broker.controller.controller import Controller, ControllerError, ControllerSettings
from dm_broker.tasks import stop_tasks
from pydantic import ValidationError

from . import API_VERSION, listeners, lost_volumes, manifests, naming, volumes
from .cache import ObjectCache
from .children import Children, ensure_token
from .conditions import condition
from .controller_tls import ControllerTls
from .crds import CrdVersions
from .events import EventRecorder
from .fencing import RackResolver, on_pod_event
from .kube import ApiError, Kube, collection_path, object_path
from .metrics import BROKERS_ON_LOST_NODES, ERRORS, RECONCILE_SECONDS, RECONCILES, VOLUMES_REPLACED
from .models import DMClusterSpec, known_part
from .moves import Mover
from .objects import Obj, annotations_of, being_deleted, pod_ready
from .planning import BrokerPod, next_roll_step, scale_down_blocker
from .restarts import restart_broker, roll_condition
from .settings import OperatorSettings
from .status import StatusWriter, broker_statuses, identity_condition, ready_condition, stray_condition
from .store import CrdStatusStore
from .tls_secrets import TlsSecrets
from .topics import TopicReconciler
from .users import UserReconciler
from .volume_replacement import find_stranded, replace_volume, restart_claimless

log = logging.getLogger(__name__)
FILE_SYSTEM_GROWS = "so that its volume's file system grows (offline expansion)"
DEBOUNCE_S = 0.2  # a burst of watch events (a failover's status writes) becomes one pass


def controller_settings(spec: DMClusterSpec) -> ControllerSettings:
    """The controller's settings from spec.config (an invalid config leaves the defaults: the
    ConfigValid condition reports it)."""
    try:
        config = BrokerConfig.build({k: str(v).lower() if isinstance(v, bool) else str(v)
                                     for k, v in spec.config.items()}, environ={})
    except ConfigError:
        config = BrokerConfig.build({}, environ={})
    return ControllerSettings.from_config(config)


def dmcluster_path(namespace: str, name: str) -> str:
    return f"/apis/{API_VERSION}/namespaces/{namespace}/dmclusters/{name}"


class ClusterRuntime:
    def __init__(self, kube: Kube, cache: ObjectCache, settings: OperatorSettings, namespace: str, name: str,
                 uid: str, controller: Controller, store: CrdStatusStore, token: str, racks: RackResolver,
                 status: Obj, crd_versions: CrdVersions | None = None,
                 controller_tls: ControllerTls | None = None) -> None:
        self.kube = kube
        self.cache = cache
        self.settings = settings
        self.namespace = namespace
        self.name = name
        self.uid = uid
        self.controller = controller
        self.store = store
        self.token = token
        self.racks = racks
        self.crd_versions = crd_versions
        self.controller_tls = controller_tls
        self.labels = {"namespace": namespace, "cluster": name}
        self.path = dmcluster_path(namespace, name)
        self.recorder = EventRecorder(kube, namespace, {"apiVersion": API_VERSION, "kind": "DMCluster", "name": name,
                                                        "namespace": namespace, "uid": uid})
        self.children = Children(kube, cache, self.recorder, namespace)
        self.topics = TopicReconciler(kube, cache, controller, store, self.recorder, namespace, name)
        self.mover = Mover(controller, self.recorder, name, (status.get("rebalance") or {}).get("throttle"),
                           status.get("balancedBrokers"))
        self.topics.before_moves = self._throttle_for_moves
        self.status = StatusWriter(kube, self.recorder, self.path, controller, self.labels, status)
        self.tls = TlsSecrets(kube, self.children, self.recorder, namespace, name, settings.cluster_domain)
        self.users = UserReconciler(kube, cache, controller, self.children, namespace, name, uid, self.recorder)
        self.wake = asyncio.Event()
        self.spec: DMClusterSpec | None = None
        self._pdb_api: str | None = None
        self._refusal_reported: str | None = None  # the VolumeExpansionRefused Event last posted
        self._volumes_seen: dict[str, Obj] = {}  # PersistentVolumes of unscheduled brokers (lost_volumes)
        # claim -> (size asked, its resourceVersion then, the API server's answer): not asked again every pass
        self._refused_claims: dict[str, tuple[str, str, str]] = {}
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, kube: Kube, cache: ObjectCache, settings: OperatorSettings, namespace: str, name: str,
                   uid: str, crd_versions: CrdVersions | None = None,
                   controller_tls: ControllerTls | None = None) -> ClusterRuntime:
        """Starts the cluster's controller from the resources' status. Without a cluster document there
        (a re-created DMCluster, a reinstall, a restore) the controller recovers the topics from what the
        brokers hold; it knows how many to wait for."""
        obj = await kube.get(dmcluster_path(namespace, name))
        spec = DMClusterSpec.model_validate(known_part(DMClusterSpec, obj.get("spec") or {})[0])
        token = await ensure_token(kube, namespace, name, uid)
        store = CrdStatusStore(kube, namespace, name, uid)
        racks = RackResolver(kube, namespace, name)
        racks.spec = spec
        controller = await Controller.open(store, rack_resolver=racks, expected_brokers=spec.replicas,
                                           **controller_settings(spec).model_dump())
        controller.start()
        log.info("%s/%s: controller running (%d topics from status)", namespace, name, len(controller.topics))
        return cls(kube, cache, settings, namespace, name, uid, controller, store, token, racks,
                   obj.get("status") or {}, crd_versions, controller_tls)

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"dmcluster-{self.namespace}-{self.name}")

    async def stop(self) -> None:
        await stop_tasks(self._task)
        await self.controller.close()
        self.status.clear_metrics()

    async def _run(self) -> None:
        backoff = 1.0
        while True:
            started = time.monotonic()
            try:
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
                    await self.status.report_error(str(exc))
                delay = backoff
                backoff = min(backoff * 2, 30.0)
            RECONCILE_SECONDS.observe(time.monotonic() - started)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), delay)
            await asyncio.sleep(DEBOUNCE_S)
            self.wake.clear()

    async def on_pod_event(self, event_type: str, pod: Obj) -> None:
        self.wake.set()
        await on_pod_event(self.controller, self.name, self.labels, event_type, pod)

    # -- one pass ----------------------------------------------------------------------------------

    async def reconcile(self) -> None:
        obj = await self.cache.get(API_VERSION, "DMCluster", "dmclusters", self.namespace, self.name)
        if obj is None or being_deleted(obj) or obj["metadata"]["uid"] != self.uid:
            return  # being deleted: owned children go with it (garbage collection)
        generation = obj["metadata"].get("generation")
        known, unknown = known_part(DMClusterSpec, obj.get("spec") or {})
        try:
            spec = DMClusterSpec.model_validate(known)
        except ValidationError as exc:
            # What the CRD's schema cannot say (listeners that clash, renewal longer than validity):
            # nothing changes until the spec is fixed; the brokers keep what they run.
            await self._report_invalid_spec(exc, generation)
            return
        self.spec = self.racks.spec = spec
        self.controller.configure(controller_settings(spec))
        owner = naming.owner_reference(self.name, self.uid)
        conditions = [condition("SpecValid", True, "Valid", "the spec is valid")]
        try:
            properties = manifests.render_config(spec.config, listeners.properties(spec, self.name))
            conditions.append(condition("ConfigValid", True, "Valid", "broker configuration is valid"))
            config_ok = True
        except ConfigError as exc:
            config_ok = False
            conditions.append(condition("ConfigValid", False, "InvalidConfig", str(exc)))
            properties = await self._applied_properties()
        ns, name = self.namespace, self.name
        tls = None
        if listeners.needs_certificates(spec):
            tls = await self.tls.reconcile(spec, owner)
            conditions.append(condition("Certificates", not tls.problems, "Problem" if tls.problems else "Valid",
                                        "; ".join(tls.problems) or "CAs and the brokers' certificate are valid"))
            if listeners.secured(spec) and tls.cluster_ca is not None and self.controller_tls is not None and \
                    self.controller_tls.install(ns, name, tls.cluster_ca):
                log.info("%s/%s: the controller API's TLS certificate issued by the cluster CA", ns, name)
        await self.users.reconcile_all(spec, tls)
        await self.children.apply(manifests.service_account(name, ns, owner))
        await self.children.apply(manifests.headless_service(name, ns, owner, spec))
        await self.children.apply(manifests.bootstrap_service(name, ns, owner, spec))
        await self.children.apply(manifests.pod_disruption_budget(name, ns, owner, await self._pdb_version()))
        await self._network_policy(spec, owner)
        await self.children.apply(manifests.config_map(name, ns, owner, properties))

        topics = self.controller.topics
        current = await self.children.live(manifests.statefulset(name, ns, owner, spec, self.settings,
                                                                 replicas=spec.replicas, properties=properties))
        current_replicas = current["spec"]["replicas"] if current else 0
        replicas = spec.replicas
        throttle = spec.rebalance.throttle
        blocked = None
        if current is not None and spec.replicas < current_replicas:
            blocked = scale_down_blocker(topics, current_replicas, spec.replicas)
            if blocked:
                replicas = current_replicas  # the brokers stay until they are drained
                reason, blocked = await self.mover.drain(spec.replicas, throttle)
        conditions.append(condition("ScaleDownBlocked", bool(blocked), reason if blocked else "None", blocked or ""))
        conditions.append(await self.mover.rebalance_after_scale_up(spec.replicas, throttle))
        sts = manifests.statefulset(name, ns, owner, spec, self.settings, replicas=replicas, properties=properties)
        storage_note = await self.children.apply(sts, immutable=("spec", "volumeClaimTemplates"))
        target = sts["spec"]["template"]["metadata"]["annotations"]["dm.dev/revision"]

        pods = await self._broker_pods()
        await self._forget_removed_brokers(replicas, pods)
        claims = await self._broker_claims()
        await self._claims_ownership(claims, spec.storage.deleteClaim)
        wanted, grown = await self._grow_volumes(claims, spec.storage.size)
        conditions.append(grown)
        conditions.append(await self._volumes_on_lost_nodes(spec, pods, claims))
        resize = volumes.restarts_for_file_systems(
            wanted, naming.claim_prefix(name),
            {i: p["metadata"].get("creationTimestamp", "") for i, p in pods.items()})
        views = [BrokerPod(i, pod_ready(p), annotations_of(p).get("dm.dev/revision"), being_deleted(p),
                           FILE_SYSTEM_GROWS if i in resize else None)
                 for i, p in pods.items()]
        step = next_roll_step(target, views, replicas, topics, manifests.min_insync_default(spec.config))
        if step.restart is not None:
            view = next(v for v in views if v.id == step.restart)
            why = view.restart_for if view.revision == target else None  # an outdated pod restarts for its revision
            await restart_broker(self.kube, self.recorder, ns, name, step.restart, target, why)
            self.cache.forget("Pod", ns, naming.pod(name, step.restart))
        conditions.append(roll_condition(step))
        if storage_note:
            conditions.append(condition("StorageChangePending", True, "ImmutableVolumeClaimTemplate", storage_note))

        if not (obj.get("status") or {}).get("controller"):
            await self.controller.ensure_cluster_document()  # a wiped status gets the document back
        conditions.append(stray_condition(self.controller))
        conditions.append(identity_condition(pods))
        if (self.crd_versions is not None and self.crd_versions.refused) or unknown:
            refused = self.crd_versions.refused if self.crd_versions is not None else ""
            ignored = f"fields this operator does not know are ignored: {', '.join(unknown)}" if unknown else ""
            conditions.append(condition("CrdVersion", False, "NewerSchemaInstalled",
                                        "; ".join(m for m in (refused, ignored) if m)[:1000]))
        await self.topics.reconcile_all()
        await self.mover.settle()
        self.status.publish_metrics()
        brokers = broker_statuses(self.controller, replicas, pods, name)
        status = {
            "observedGeneration": generation,
            "conditions": self.status.conditions([ready_condition(brokers, spec.replicas, config_ok), *conditions],
                                                 generation),
            "bootstrap": manifests.bootstrap_address(name, ns, self.settings.cluster_domain),
            "replicas": len(pods), "readyReplicas": sum(b["ready"] for b in brokers if b["id"] in pods),
            "desiredReplicas": spec.replicas, "selector": naming.selector_string(name), "brokers": brokers,
            "revision": target, "balancedBrokers": self.mover.balanced, "rebalance": self.mover.progress(),
            "listeners": listeners.statuses(spec, name, ns, self.settings.cluster_domain),
            "http": listeners.http_status(spec, name, ns, self.settings.cluster_domain),
            "certificates": tls.status() if tls is not None else None,
        }
        await self.status.write(status)
        if self.status.written is not None:
            self.cache.observe(self.status.written)

    async def _report_invalid_spec(self, exc: ValidationError, generation: int | None) -> None:
        message = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'spec'}: {e['msg'].removeprefix('Value error, ')}"
                            for e in exc.errors())[:1000]
        conditions = [condition("Ready", False, "InvalidSpec", "the spec is invalid: see SpecValid"),
                      condition("SpecValid", False, "InvalidSpec", message)]
        await self.status.write({"observedGeneration": generation,
                                 "conditions": self.status.conditions(conditions, generation)})

    async def _throttle_for_moves(self) -> None:
        if self.spec is not None:
            await self.mover.throttle(self.spec.rebalance.throttle)

    async def _broker_pods(self) -> dict[int, Obj]:
        pods = await self.cache.list("v1", "Pod", "pods", self.namespace, naming.MANAGED)
        by_id: dict[int, Obj] = {}
        for pod in pods:
            if any((pod["metadata"].get("labels") or {}).get(k) != v
                   for k, v in naming.selector_labels(self.name).items()):
                continue
            broker_id = naming.broker_id_of(pod["metadata"]["name"], self.name)
            if broker_id is not None:
                by_id[broker_id] = pod
        return by_id

    async def _applied_properties(self) -> str:
        cm = self.cache.peek("ConfigMap", self.namespace, naming.config_map(self.name))
        if cm is None:
            cm = await self.kube.get_or_none(f"/api/v1/namespaces/{self.namespace}/configmaps/"
                                             f"{naming.config_map(self.name)}")
        return (cm or {}).get("data", {}).get("broker.properties", "")

    async def _network_policy(self, spec: DMClusterSpec, owner: Obj) -> None:
        """The brokers' NetworkPolicy while spec.networkPolicy.enabled, none otherwise."""
        policy = manifests.network_policy(self.name, self.namespace, owner, spec)
        if spec.networkPolicy.enabled:
            await self.children.apply(policy)
        elif await self.children.live(policy) is not None:
            await self.kube.delete(object_path(policy))

    async def _pdb_version(self) -> str:
        if self._pdb_api is None:
            # policy/v1 from Kubernetes 1.21 on; older servers only have policy/v1beta1.
            self._pdb_api = "policy/v1" if await self.kube.served("policy/v1") else "policy/v1beta1"
        return self._pdb_api

    async def _forget_removed_brokers(self, replicas: int, pods: dict[int, Obj]) -> None:
        for broker_id in [b for b in self.controller.brokers if b >= replicas and b not in pods]:
            try:
                await self.controller.unregister(broker_id)
                self.recorder.record("BrokerRemoved", f"broker {broker_id} left the cluster")
            except ControllerError as exc:
                log.warning("%s/%s: %s", self.namespace, self.name, exc.message)

    async def _broker_claims(self) -> list[Obj]:
        """This cluster's broker claims (the full broker selector and the StatefulSet's claim names): another
        release of the same name, or anything else labelled with it, is never touched."""
        claims = await self.cache.list("v1", "PersistentVolumeClaim", "persistentvolumeclaims", self.namespace,
                                       naming.MANAGED)
        prefix = naming.claim_prefix(self.name)
        selector = naming.selector_labels(self.name)
        return [claim for claim in claims
                if all((claim["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
                and claim["metadata"]["name"].startswith(prefix)
                and claim["metadata"]["name"].removeprefix(prefix).isdigit()]

    async def _grow_volumes(self, claims: list[Obj], size: str) -> tuple[volumes.VolumePlan, Obj]:
        """Asks every bound claim smaller than spec.storage.size for that size (volumes.py); the plan, and the
        VolumesExpanded condition."""
        wanted = volumes.plan(size, claims)
        refused: dict[str, str] = {}
        by_name = {c["metadata"]["name"]: c for c in claims}
        for name in wanted.grow:
            claim = by_name[name]
            version = claim["metadata"]["resourceVersion"]
            earlier = self._refused_claims.get(name)
            if earlier is not None and earlier[:2] == (size, version):
                refused[name] = earlier[2]  # the same question to the same claim gets the same answer
                continue
            try:
                result = await self.kube.patch(
                    f"{collection_path('v1', 'persistentvolumeclaims', self.namespace)}/{name}",
                    {"metadata": {"resourceVersion": version},
                     "spec": {"resources": {"requests": {"storage": size}}}})
            except ApiError as exc:
                if exc.status == 409:
                    continue  # changed meanwhile: asked again at the next pass
                if exc.status not in (403, 422):
                    raise
                refused[name] = str(exc.body.get("message", exc))
                self._refused_claims[name] = (size, version, refused[name])
                continue
            self.cache.observe({"apiVersion": "v1", "kind": "PersistentVolumeClaim", **result})
            self.recorder.record("VolumeExpansion", f"claim {name} asked to grow to {size}")
        result = volumes.volumes_condition(wanted, refused)
        if refused and result["message"] != self._refusal_reported:  # once, not at every pass
            self.recorder.record("VolumeExpansionRefused", result["message"], "Warning")
        self._refusal_reported = result["message"] if refused else None
        return wanted, result

    async def _volumes_on_lost_nodes(self, spec: DMClusterSpec, pods: dict[int, Obj], claims: list[Obj]) -> Obj:
        """Brokers stranded by a node that is gone: a new volume for one of them when decided (ADR 0054), a pod
        left without its claim made again; the VolumesOnLostNodes condition."""
        prefix = naming.claim_prefix(self.name)
        by_broker = {int(c["metadata"]["name"].removeprefix(prefix)): c for c in claims}
        policy = spec.storage.lostNode
        found = await find_stranded(self.kube, pods, by_broker, self._volumes_seen)
        chosen = lost_volumes.due(found, policy.replaceVolume, policy.afterSeconds,
                                  datetime.datetime.now(datetime.UTC))
        BROKERS_ON_LOST_NODES.labels(**self.labels).set(len(found))
        if chosen is not None:
            await replace_volume(self.kube, self.recorder, self.namespace, self.name, chosen)
            VOLUMES_REPLACED.labels(**self.labels).inc()
            self._volumes_seen.pop(chosen.volume, None)
            self.cache.forget("PersistentVolumeClaim", self.namespace, chosen.claim)
            self.cache.forget("Pod", self.namespace, naming.pod(self.name, chosen.broker))
        await restart_claimless(self.kube, self.namespace, self.name, pods, by_broker)
        return lost_volumes.lost_volumes_condition(found, policy.replaceVolume, policy.afterSeconds, self.namespace)

    async def _claims_ownership(self, claims: list[Obj], delete_with_cluster: bool) -> None:
        """PVCs of a StatefulSet outlive it; owned by the DMCluster they are deleted with it."""
        for claim in claims:
            name = claim["metadata"]["name"]
            refs = claim["metadata"].get("ownerReferences") or []
            owned = any(r.get("uid") == self.uid for r in refs)
            if owned == delete_with_cluster:
                continue
            others = [r for r in refs if r.get("uid") != self.uid]
            new = [*others, {**naming.owner_reference(self.name, self.uid), "controller": False}] \
                if delete_with_cluster else others
            result = await self.kube.patch(
                f"{collection_path('v1', 'persistentvolumeclaims', self.namespace)}/{name}",
                {"metadata": {"ownerReferences": new, "resourceVersion": claim["metadata"]["resourceVersion"]}})
            self.cache.observe({"apiVersion": "v1", "kind": "PersistentVolumeClaim", **result})
