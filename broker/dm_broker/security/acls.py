"""Kafka's ACL model and authorizer (pure: no I/O).

Semantics of Kafka's StandardAuthorizer / AclAuthorizer: an ACL names a resource by literal name,
the literal wildcard `*`, or a prefix; a principal (or `User:*`); a host (or `*`); an operation;
ALLOW or DENY. A matching DENY wins; otherwise a matching ALLOW of the operation, of ALL, or of an
operation that implies it (READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies
DESCRIBE_CONFIGS) allows. Super users are allowed everything; a resource no ACL names at all is
allowed only with `allow.everyone.if.no.acl.found`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from enum import IntEnum

from pydantic import BaseModel, ConfigDict

from .principal import Principal

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


IMPLIED_BY = {
    Operation.DESCRIBE: {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER},
    Operation.DESCRIBE_CONFIGS: {Operation.ALTER_CONFIGS},
}
# The ALLOW operations that grant each operation (itself, ALL, and what implies it).
GRANTED_BY = {op: frozenset({op, Operation.ALL} | IMPLIED_BY.get(op, set())) for op in Operation}

# Operations that mean something for each resource type (Kafka's, for the authorized-operations bitfields).
OPERATIONS = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE, Operation.DELETE,
                         Operation.ALTER, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                           Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
}


class AclBinding(BaseModel):
    model_config = ConfigDict(frozen=True)
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission


class AclFilter(BaseModel):
    """DescribeAcls / DeleteAcls: None and ANY match everything; PatternType.MATCH matches the ACLs
    that apply to a resource of that name (literal, wildcard and prefixes)."""

    model_config = ConfigDict(frozen=True)
    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, acl.resource_type):
            return False
        if not self._matches_pattern(acl):
            return False
        return ((self.principal is None or self.principal == acl.principal)
                and (self.host is None or self.host == acl.host)
                and self.operation in (Operation.ANY, acl.operation)
                and self.permission in (Permission.ANY, acl.permission))

    def _matches_pattern(self, acl: AclBinding) -> bool:
        if self.pattern_type == PatternType.MATCH:
            if self.resource_name is None:
                return True
            if acl.pattern_type == PatternType.LITERAL:
                return acl.resource_name in (self.resource_name, WILDCARD)
            return self.resource_name.startswith(acl.resource_name)
        if self.pattern_type not in (PatternType.ANY, acl.pattern_type):
            return False
        return self.resource_name is None or self.resource_name == acl.resource_name


def validate(acl: AclBinding) -> str | None:
    """Why Kafka would refuse to create this ACL, or None."""
    if acl.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        return "the resource type must be a specific one"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "the pattern type must be LITERAL or PREFIXED"
    if acl.operation in (Operation.ANY, Operation.UNKNOWN):
        return "the operation must be a specific one"
    if acl.permission not in (Permission.ALLOW, Permission.DENY):
        return "the permission must be ALLOW or DENY"
    if not acl.resource_name:
        return "the resource name is empty"
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return f"the only CLUSTER resource is {CLUSTER_NAME}"
    if acl.pattern_type == PatternType.PREFIXED and acl.resource_name == WILDCARD:
        return "a PREFIXED pattern cannot be the wildcard *"
    try:
        Principal.parse(acl.principal)
    except ValueError as exc:
        return str(exc)
    if not acl.host:
        return "the host is empty (use * for any host)"
    return None


class Authorizer:
    """Answers authorization questions from a set of ACLs (rebuilt when the set changes)."""

    def __init__(self, acls: Iterable[AclBinding], super_users: Iterable[str] = (),
                 allow_if_no_acl: bool = False) -> None:
        self.acls = list(acls)
        self.super_users = {s.strip() for s in super_users if s.strip()}
        self.allow_if_no_acl = allow_if_no_acl
        self._literal: dict[tuple[ResourceType, str], list[AclBinding]] = defaultdict(list)
        self._prefixed: dict[ResourceType, dict[str, list[AclBinding]]] = defaultdict(lambda: defaultdict(list))
        for acl in self.acls:
            if acl.pattern_type == PatternType.PREFIXED:
                self._prefixed[acl.resource_type][acl.resource_name].append(acl)
            else:
                self._literal[(acl.resource_type, acl.resource_name)].append(acl)

    def _matching(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        found = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found += self._literal.get((resource_type, WILDCARD), ())
        prefixed = self._prefixed.get(resource_type)
        if prefixed:
            for prefix, acls in prefixed.items():
                if name.startswith(prefix):
                    found += acls
        return found

    def authorize(self, principal: Principal, host: str, operation: Operation, resource_type: ResourceType,
                  name: str) -> bool:
        who = str(principal)
        if who in self.super_users:
            return True
        acls = self._matching(resource_type, name)
        if not acls:
            return self.allow_if_no_acl
        mine = [a for a in acls if a.principal in (who, WILDCARD_PRINCIPAL) and a.host in (host, WILDCARD)]
        if any(a.permission == Permission.DENY and a.operation in (operation, Operation.ALL) for a in mine):
            return False
        granting = GRANTED_BY[operation]
        return any(a.permission == Permission.ALLOW and a.operation in granting for a in mine)

    def authorize_any(self, principal: Principal, host: str, operation: Operation,
                      resource_type: ResourceType) -> bool:
        """Whether `principal` may do `operation` on at least one resource of the type: Kafka's
        Authorizer.authorizeByResourceType (how an idempotent producer without IDEMPOTENT_WRITE is
        admitted). A literal ALLOW counts unless a literal DENY of the same name or a prefixed DENY
        covering it cancels it; a prefixed ALLOW unless a prefixed DENY covers the prefix; a wildcard
        DENY refuses everything. Super users and `allow.everyone.if.no.acl.found` are decided as
        Kafka does, by authorizing a made-up literal name first."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        who = str(principal)
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[tuple[PatternType, str]] = []
        for a in self.acls:
            if a.resource_type != resource_type or a.principal not in (who, WILDCARD_PRINCIPAL) \
                    or a.host not in (host, WILDCARD) or a.operation not in (operation, Operation.ALL):
                continue
            if a.permission == Permission.DENY:
                if a.pattern_type == PatternType.LITERAL and a.resource_name == WILDCARD:
                    return False
                (deny_literal if a.pattern_type == PatternType.LITERAL else deny_prefixed).add(a.resource_name)
            elif a.permission == Permission.ALLOW:
                if a.pattern_type == PatternType.LITERAL and a.resource_name == WILDCARD:
                    return True
                allow.append((a.pattern_type, a.resource_name))
        for pattern, name in allow:
            if pattern == PatternType.LITERAL and name in deny_literal:
                continue
            if any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                continue
            return True
        return False

    def operations(self, principal: Principal, host: str, resource_type: ResourceType, name: str) -> int:
        """Kafka's authorized-operations bit field for a resource (Metadata, DescribeGroups, DescribeCluster)."""
        bits = 0
        for op in OPERATIONS.get(resource_type, ()):
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << op
        return bits
