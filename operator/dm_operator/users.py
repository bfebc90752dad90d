"""User resources of one DMCluster: credentials in a Secret of the User's name (a SCRAM-SHA-512 password,
or a client certificate the clients CA signs), the credential, the user's ACLs and its client quotas in
the cluster's controller, exactly as the spec says. Deleting the User removes its Secret (owned by the User)
and, once the operator sees it gone, its credential, ACLs and quotas — unless its DMCluster, namespace or CRD
is being deleted with it. There is no finalizer (ADR 0061): the users it manages are recorded
(`user_record`), so a User deleted while no operator ran is revoked when one starts. Everything is read from
the watch cache, so a pass that changes nothing reads and writes nothing."""

from __future__ import annotations

import contextlib
import logging
import secrets
from typing import Any

from dm_broker.controller.controller import Controller, ControllerError
from dm_broker.controller.models import QuotaAlteration, ScramAlteration
from dm_broker.quotas.entities import USER
from dm_broker.security.acls import AclFilter, PatternType
from dm_broker.security.scram import ScramCredential, from_password, verify_password

from . import API_VERSION, GROUP, VERSION, certificates, deletions, finalizers, naming, user_quotas
from .cache import ObjectCache
from .children import Children
from .conditions import condition, merge_conditions
from .events import EventRecorder
from .kube import ApiError, Kube
from .metrics import ERRORS, RECONCILES
from .models import DMClusterSpec, UserSpec, known_part
from .objects import Obj, being_deleted
from .tls_secrets import TlsState, decoded, secret
from .user_acls import bindings, diff, principal, username
from .user_record import RecordedUser, UserRecord

log = logging.getLogger(__name__)
USER_FINALIZER = "dm.dev/user"  # put by dm before ADR 0061; taken off wherever the operator meets it
MECHANISM = "SCRAM-SHA-512"


def users_path(namespace: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/users"


def user_cluster(obj: Obj) -> str:
    return (obj.get("spec") or {}).get("cluster", "")


def jaas(user: str, password: str) -> str:
    return f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";'


class UserReconciler:
    def __init__(self, kube: Kube, cache: ObjectCache, controller: Controller, children: Children, namespace: str,
                 cluster: str, cluster_uid: str, recorder: EventRecorder) -> None:
        self.kube = kube
        self.cache = cache
        self.controller = controller
        self.children = children
        self.namespace = namespace
        self.cluster = cluster
        self.owner = naming.owner_reference(cluster, cluster_uid)
        self.recorder = recorder
        self.record = UserRecord(kube, children, namespace, cluster)
        # user -> (password, credential) last found to match: checking costs 4096 PBKDF2 rounds, so a
        # pass that changes nothing does not redo it.
        self._matching: dict[str, tuple[str, ScramCredential]] = {}

    async def reconcile_all(self, cluster_spec: DMClusterSpec, tls: TlsState | None) -> None:
        listed = [obj for obj in await self.cache.list(API_VERSION, "User", "users", self.namespace)
                  if user_cluster(obj) == self.cluster]
        try:
            await self._deleted_users(listed)
        except (ApiError, ControllerError) as exc:
            log.warning("%s/%s: deleted Users wait for the next pass: %s", self.namespace, self.cluster, exc)
        for obj in listed:
            try:
                await self.reconcile(obj, cluster_spec, tls)
                RECONCILES.labels(kind="User", result="ok").inc()
            except Exception:
                RECONCILES.labels(kind="User", result="error").inc()
                ERRORS.labels(kind="User").inc()
                log.exception("%s: User %s failed", self.namespace, obj["metadata"]["name"])

    async def reconcile(self, obj: Obj, cluster_spec: DMClusterSpec, tls: TlsState | None) -> None:
        meta = obj["metadata"]
        name = meta["name"]
        path = f"{users_path(self.namespace)}/{name}"
        spec = UserSpec.model_validate(known_part(UserSpec, obj.get("spec") or {})[0])
        who = principal(name, spec)
        if USER_FINALIZER in (meta.get("finalizers") or []):
            # An earlier version's finalizer; a deletion it held was handled by _deleted_users.
            await release(self.kube, path, obj, self.cache)
            return  # its next event (or pass) reconciles it
        if being_deleted(obj):
            return  # someone else's finalizer holds it: _deleted_users revoked it
        await self._record(name, RecordedUser.of(obj, spec))
        ready, acl_count = await self._apply(obj, name, spec, cluster_spec, tls)
        status = obj.get("status") or {}
        generation = obj["metadata"].get("generation")
        new_status: dict[str, Any] = {
            "observedGeneration": generation, "username": username(name, spec), "principal": who,
            "secret": name, "acls": acl_count,
            "conditions": merge_conditions(status.get("conditions", []), [ready], generation)}
        if {k: status.get(k) for k in new_status} != new_status:
            with contextlib.suppress(ApiError):
                written = await self.kube.patch(f"{path}/status", {"status": new_status})
                self.cache.observe({"apiVersion": API_VERSION, "kind": "User", **written})

    async def _apply(self, obj: Obj, name: str, spec: UserSpec, cluster_spec: DMClusterSpec,
                     tls: TlsState | None) -> tuple[Obj, int]:
        owner = {"apiVersion": API_VERSION, "kind": "User", "name": name, "uid": obj["metadata"]["uid"],
                 "controller": True, "blockOwnerDeletion": True}
        who = principal(name, spec)
        try:
            if spec.authentication.type == "scram-sha-512":
                await self._scram(name, owner)
            else:
                problem = await self._certificate(name, spec, cluster_spec, tls, owner)
                if problem:
                    return condition("Ready", False, "NoClientsCa", problem), 0
            desired = bindings(name, spec)
            create, delete = diff(self.controller.cluster.acls, desired, who)
            if create:
                errors = [e for e in await self.controller.create_acls(create) if e]
                if errors:
                    return condition("Ready", False, "InvalidAcl", "; ".join(errors)[:500]), 0
            if delete:
                await self.controller.delete_acls([_exact(a) for a in delete])
            await self._quotas(username(name, spec), user_quotas.wanted(spec))
        except ControllerError as exc:
            return condition("Ready", False, "ControllerRefused", exc.message), 0
        if desired and cluster_spec.authorization is None:
            return condition("Ready", False, "AuthorizationOff", f"{len(desired)} ACLs are kept, but DMCluster "
                             f"{self.cluster} has no spec.authorization: they are not enforced"), len(desired)
        return condition("Ready", True, "Ready", f"{who}: credentials in Secret {name}, {len(desired)} ACLs"), \
            len(desired)

    async def _scram(self, name: str, owner: Obj) -> None:
        live = await self.cache.get("v1", "Secret", "secrets", self.namespace, name, naming.MANAGED)
        password = decoded(live, "password") or secrets.token_urlsafe(24)
        if live is None or decoded(live, "password") != password:
            await self.children.apply(secret(name, self.namespace, self.cluster, {**owner},
                                             {"username": name, "password": password,
                                              "sasl.jaas.config": jaas(name, password)}, "user"))
        stored = self.controller.cluster.scram.get(name, {}).get(MECHANISM)
        if stored is not None and self._matching.get(name) == (password, stored):
            return
        if stored is None or not verify_password(stored, password):
            stored = from_password(MECHANISM, password)
            results = await self.controller.alter_scram([ScramAlteration(
                user=name, mechanism=MECHANISM, credential=stored, iterations=4096)])
            if results[0].error:
                raise ControllerError(results[0].error, results[0].message or results[0].error)
        self._matching[name] = (password, stored)

    async def _quotas(self, user: str, desired: dict[str, float]) -> None:
        """The user entity's client quotas become exactly `desired` (written only when they differ)."""
        changes = user_quotas.ops(user_quotas.held(self.controller.cluster.quotas, user), desired)
        if not changes:
            return
        results = await self.controller.alter_quotas([QuotaAlteration(entity=[(USER, user)], ops=changes)], False)
        if results[0].error:
            raise ControllerError(results[0].error, results[0].message or results[0].error)

    async def _certificate(self, name: str, spec: UserSpec, cluster_spec: DMClusterSpec, tls: TlsState | None,
                           owner: Obj) -> str | None:
        if tls is None or tls.clients_ca is None:
            return (f"DMCluster {self.cluster} has no clients CA (a listener with authentication: tls makes one)"
                    if tls is None else "; ".join(tls.problems))
        live = await self.cache.get("v1", "Secret", "secrets", self.namespace, name, naming.MANAGED)
        validity = certificates.duration(cluster_spec.clientsCa.validity)
        renew = certificates.duration(cluster_spec.clientsCa.renewBefore)
        cert = decoded(live, "user.crt")
        reissue = certificates.needs_issue(cert, tls.clients_ca, renew, None) is not None
        if reissue or decoded(live, "ca.crt") != tls.cluster_bundle:
            if reissue:
                pair = certificates.issue_user(tls.clients_ca, name, validity)
                cert, key = pair.cert_pem, pair.key_pem
            else:
                key = decoded(live, "user.key")
            await self.children.apply(secret(name, self.namespace, self.cluster, {**owner},
                                             {"user.crt": cert, "user.key": key, "ca.crt": tls.cluster_bundle},
                                             "user"))
        return None

    async def _record(self, name: str, entry: RecordedUser) -> None:
        """`entry` joins the record before the cluster gives the user anything; what an earlier entry of the
        same User granted and this one does not (another principal, user name, no more SCRAM) is revoked."""
        users = await self.record.users()
        before = users.get(name)
        if before == entry:
            return
        if before is not None and before.uid == entry.uid:
            await self._revoke(name, RecordedUser(
                uid=before.uid, principal=before.principal if before.principal != entry.principal else "",
                username=before.username if before.username != entry.username else "",
                scram=before.scram and not entry.scram))
        users[name] = entry
        await self.record.save(users, self.owner)

    async def _deleted_users(self, listed: list[Obj]) -> None:
        """Recorded users whose User is gone — deleted, or deleted and created again (another UID) — lose
        their credential, ACLs and quotas, when that was a decision about the User alone (ADR 0061). Users
        an earlier version managed are recorded first, so those deleted meanwhile are found too."""
        users = await self.record.users()
        live: dict[str, str] = {}
        for obj in listed:
            name, uid = obj["metadata"]["name"], obj["metadata"]["uid"]
            if not being_deleted(obj):
                live[name] = uid
            if name not in users:
                spec = UserSpec.model_validate(known_part(UserSpec, obj.get("spec") or {})[0])
                users[name] = RecordedUser.of(obj, spec)
        for name, entry in list(users.items()):
            if live.get(name) == entry.uid or \
                    not await deletions.gone(self.kube, f"{users_path(self.namespace)}/{name}", entry.uid,
                                             lambda obj: user_cluster(obj) == self.cluster):
                continue
            wider = await deletions.wider_deletion(self.kube, self.namespace,
                                                   f"/apis/{API_VERSION}/namespaces/{self.namespace}/dmclusters/"
                                                   f"{self.cluster}", "users")
            if wider is None:
                await self._revoke(name, entry)
                self.recorder.record("UserRevoked", f"User {name} was deleted: {entry.principal} lost its "
                                                    "credentials, ACLs and quotas")
            else:
                message = f"User {name} was deleted but its credentials, ACLs and quotas are kept: {wider}"
                log.info("%s/%s: %s", self.namespace, self.cluster, message)
                self.recorder.record("UserKept", message)
            del users[name]
        await self.record.save(users, self.owner)

    async def _revoke(self, name: str, entry: RecordedUser) -> None:
        """What `entry` names leaves the cluster: the SCRAM credential of `name`, the ACLs of its principal,
        the quotas of its user name (empty fields: nothing of that kind). A refusal raises ControllerError:
        the entry stays recorded, and the next pass tries again."""
        self._matching.pop(name, None)
        if entry.scram and self.controller.cluster.scram.get(name, {}).get(MECHANISM) is not None:
            await self.controller.alter_scram([ScramAlteration(user=name, mechanism=MECHANISM)])
        if entry.principal and any(a.principal == entry.principal for a in self.controller.cluster.acls):
            await self.controller.delete_acls([AclFilter(principal=entry.principal)])
        if entry.username:
            await self._quotas(entry.username, {})
        log.info("%s: %s revoked in cluster %s (User %s)", self.namespace, entry.principal or name, self.cluster,
                 name)


def _exact(acl: Any) -> AclFilter:
    return AclFilter(resource_type=acl.resource_type, resource_name=acl.resource_name,
                     pattern_type=acl.pattern_type if acl.pattern_type != PatternType.ANY else PatternType.LITERAL,
                     principal=acl.principal, host=acl.host, operation=acl.operation, permission=acl.permission)


async def release(kube: Kube, path: str, obj: Obj, cache: ObjectCache | None = None) -> None:
    await finalizers.remove(kube, path, obj, USER_FINALIZER, cache)


async def release_orphans(kube: Kube, namespace: str, cluster: str | None = None) -> int:
    """Releases the finalizers of Users whose cluster is gone (`cluster`), or of every User in a namespace
    being deleted — their credentials and ACLs went with the cluster — and returns how many. A User
    whose cluster comes back gets its finalizer again at its next reconcile."""
    return await finalizers.release_all(kube, users_path(namespace), USER_FINALIZER, user_cluster, cluster)
