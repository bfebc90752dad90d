"""Authorization by construction (ADR 0024): every API dm serves declares what Kafka checks for it, the
declarations match Kafka's rules (tests/kafka_acl_rules.py, written from KafkaApis), a handler cannot ask
an undeclared question, every whole-request refusal carries the authorization error at every version,
and docs/security.md prints the table."""

from __future__ import annotations

from pathlib import Path

import pytest
from dm_broker.protocol.access import UndeclaredCheck, empty
from dm_broker.protocol.apis import SPECS
from dm_broker.protocol.codec import request_class, response_class
from dm_broker.protocol.dispatch import RequestContext
from dm_broker.security.acls import Operation, ResourceType
from dm_broker.tools.access_docs import access_table
from kafka_acl_rules import AUTHORIZATION_FAILED, FILTERED_ALSO, RULES, error_codes
from kio.schema.errors import ErrorCode

KAFKA_TYPES = {"TOPIC": ResourceType.TOPIC, "GROUP": ResourceType.GROUP, "BROKER": ResourceType.CLUSTER,
               "TRANSACTIONAL_ID": ResourceType.TRANSACTIONAL_ID}


def test_every_served_api_has_kafkas_rule():
    served = {s.key for s in SPECS}
    assert served == set(RULES), f"APIs without a rule: {sorted(served - set(RULES))}; " \
                                 f"rules without an API: {sorted(set(RULES) - served)}"


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_declarations_are_kafkas(spec):
    rule = RULES[spec.key]
    assert spec.access.public == rule.public
    declared = {(c.resource_type, c.operation) for c in spec.access.checks}
    if spec.access.requires is not None:
        declared.add((spec.access.requires.resource_type, spec.access.requires.operation))
    assert declared == {(KAFKA_TYPES[t], Operation[op]) for t, op in rule.declared}
    # OffsetFetch and DescribeTransactions leave out the topics of an answer the principal may not describe
    filtered = rule.hides is not None or spec.key in FILTERED_ALSO or spec.name in (
        "OffsetFetch", "DescribeTransactions", "DescribeShareGroupOffsets")
    assert spec.access.filtered == filtered, spec.name


@pytest.mark.parametrize("spec", [s for s in SPECS if s.access.requires is not None], ids=lambda s: s.name)
def test_whole_request_refusals_carry_the_error_at_every_version(spec):
    rule = RULES[spec.key]
    for version in range(spec.min_version, spec.max_version + 1):
        request = rule.request()
        cls = response_class(spec.key, version)
        refused = spec.access.refusal(request, cls, ErrorCode.cluster_authorization_failed, "no")
        assert isinstance(refused, cls)
        codes = error_codes(refused)
        # Kafka's own DescribeLogDirs v1-2 answer a refused request with no results and no error.
        if not (spec.name == "DescribeLogDirs" and version < 3):
            assert codes & AUTHORIZATION_FAILED, f"{spec.name} v{version}: {refused}"


def test_a_handler_cannot_ask_an_undeclared_question():
    spec = next(s for s in SPECS if s.name == "JoinGroup")
    ctx = RequestContext(broker=None, header=None, response_cls=object, peer="p", session=None,  # type: ignore[arg-type]
                         access=spec.access, api=spec.name)
    with pytest.raises(UndeclaredCheck):
        ctx.allowed(Operation.ALTER, ResourceType.CLUSTER, "kafka-cluster")
    with pytest.raises(UndeclaredCheck):
        ctx.allowed_any(Operation.WRITE, ResourceType.TOPIC)


def test_requests_of_the_rules_build_at_their_versions():
    for key, rule in RULES.items():
        assert isinstance(rule.request(), request_class(key, rule.version))


def test_empty_builds_every_response():
    for spec in SPECS:
        for version in range(spec.min_version, spec.max_version + 1):
            empty(response_class(spec.key, version))


def test_docs_print_the_table():
    text = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
    assert access_table() in text, "docs/security.md is out of date: python -m dm_broker.tools.access_docs"
