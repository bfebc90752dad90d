"""A User resource's principal and ACLs as the cluster's authorizer holds them (pure)."""

from __future__ import annotations

from dm_broker.security.acls import CLUSTER_NAME, WILDCARD, AclBinding, Operation, PatternType, Permission, ResourceType

from .models import AclRule, UserSpec

RESOURCES = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP, "cluster": ResourceType.CLUSTER,
             "transactionalId": ResourceType.TRANSACTIONAL_ID}
OPERATIONS = {"Read": Operation.READ, "Write": Operation.WRITE, "Create": Operation.CREATE,
              "Delete": Operation.DELETE, "Alter": Operation.ALTER, "Describe": Operation.DESCRIBE,
              "ClusterAction": Operation.CLUSTER_ACTION, "DescribeConfigs": Operation.DESCRIBE_CONFIGS,
              "AlterConfigs": Operation.ALTER_CONFIGS, "IdempotentWrite": Operation.IDEMPOTENT_WRITE,
              "All": Operation.ALL}


def username(name: str, spec: UserSpec) -> str:
    """The user's name in Kafka: its SASL user name, or its certificate's subject (Strimzi's choice)."""
    return f"CN={name}" if spec.authentication.type == "tls" else name


def principal(name: str, spec: UserSpec) -> str:
    return f"User:{username(name, spec)}"


def bindings(name: str, spec: UserSpec) -> list[AclBinding]:
    """The ACLs the spec asks for, deduplicated, in order."""
    out: list[AclBinding] = []
    who = principal(name, spec)
    for rule in spec.authorization.acls if spec.authorization else []:
        for acl in _rule(rule, who):
            if acl not in out:
                out.append(acl)
    return out


def _rule(rule: AclRule, who: str) -> list[AclBinding]:
    kind = RESOURCES[rule.resource.type]
    resource = CLUSTER_NAME if kind == ResourceType.CLUSTER else (rule.resource.name or WILDCARD)
    pattern = PatternType.PREFIXED if rule.resource.patternType == "prefix" and kind != ResourceType.CLUSTER \
        else PatternType.LITERAL
    permission = Permission.DENY if rule.type == "deny" else Permission.ALLOW
    return [AclBinding(resource_type=kind, resource_name=resource, pattern_type=pattern, principal=who,
                       host=rule.host, operation=OPERATIONS[op], permission=permission) for op in rule.operations]


def diff(current: list[AclBinding], desired: list[AclBinding], who: str) -> tuple[list[AclBinding], list[AclBinding]]:
    """(to create, to delete) so that `who` has exactly `desired`."""
    mine = [a for a in current if a.principal == who]
    return [a for a in desired if a not in mine], [a for a in mine if a not in desired]
