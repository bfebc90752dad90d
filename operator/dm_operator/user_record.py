"""The users the operator manages in a cluster, recorded in a ConfigMap `<cluster>-users` the DMCluster
owns (ADR 0061). A User carries no finalizer, so its credential, ACLs and quotas are revoked after it is
gone: the record is what says, even to an operator that was not running when the User was deleted, which
principal, user name and SCRAM credential to take away. An entry is written before the credential is
created and removed once the user is revoked (or kept on purpose)."""

from __future__ import annotations

import json

from pydantic import BaseModel

from . import manifests, naming
from .children import Children
from .kube import Kube
from .models import UserSpec
from .objects import Obj
from .user_acls import principal, username

KEY = "users.json"  # as manifests.users_record writes it


class RecordedUser(BaseModel):
    uid: str  # the User resource's: one of the same name created later is another user
    principal: str
    username: str
    scram: bool  # whether it has a SCRAM credential (of its name) to remove

    @classmethod
    def of(cls, obj: Obj, spec: UserSpec) -> RecordedUser:
        name = obj["metadata"]["name"]
        return cls(uid=obj["metadata"]["uid"], principal=principal(name, spec), username=username(name, spec),
                   scram=spec.authentication.type == "scram-sha-512")


def parse(config_map: Obj | None) -> dict[str, RecordedUser]:
    raw = ((config_map or {}).get("data") or {}).get(KEY)
    if not raw:
        return {}
    return {name: RecordedUser.model_validate(entry) for name, entry in json.loads(raw).items()}


def config_map(cluster: str, namespace: str, owner: Obj, users: dict[str, RecordedUser]) -> Obj:
    text = json.dumps({name: users[name].model_dump() for name in sorted(users)}, separators=(",", ":"))
    return manifests.users_record(cluster, namespace, owner, text)


class UserRecord:
    """The record as last written; read from the API server once, at the first use."""

    def __init__(self, kube: Kube, children: Children, namespace: str, cluster: str) -> None:
        self.kube = kube
        self.children = children
        self.namespace = namespace
        self.cluster = cluster
        self._users: dict[str, RecordedUser] | None = None

    async def users(self) -> dict[str, RecordedUser]:
        if self._users is None:
            path = f"/api/v1/namespaces/{self.namespace}/configmaps/{naming.users_record(self.cluster)}"
            self._users = parse(await self.kube.get_or_none(path))
        return dict(self._users)

    async def save(self, users: dict[str, RecordedUser], owner: Obj) -> None:
        if users == self._users:
            return
        await self.children.apply(config_map(self.cluster, self.namespace, owner, users))
        self._users = dict(users)
