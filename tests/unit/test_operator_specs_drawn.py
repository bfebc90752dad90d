"""Specs drawn from the CRDs' own schemas (what an API server admits) through the operator's pure logic: each
is either refused the way its reconciler reports (SpecValid, ConfigValid, a Topic's or a User's Ready
condition) or turned into manifests and requests, never an exception a reconcile pass dies of (2026-12-02: a
CA validity of 1,000,000,000 days was an OverflowError, which failed every pass of its cluster).
DM_FUZZ_EXAMPLES draws per test (100)."""

from __future__ import annotations

import os
import string
from typing import Any

import pytest
from dm_broker.config import BROKER_PROPERTIES, TOPIC_PROPERTIES, ConfigError
from dm_operator import crdgen, listeners, manifests, naming, user_acls, user_quotas
from dm_operator.models import DMClusterSpec, TopicSpec, UserSpec, known_part
from dm_operator.planning import TopicRefusal, plan_topic, topic_configs
from dm_operator.settings import OperatorSettings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

DRAWS = settings(max_examples=int(os.environ.get("DM_FUZZ_EXAMPLES", "100")), deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
OWNER = naming.owner_reference("demo", "0b7e2a9c-0000-4000-8000-000000000001")
KEY_CHARS = string.ascii_letters + string.digits + ".-_/"


def _spec_schema(model: type) -> dict[str, Any]:
    return crdgen.schema_of(model, False)  # the CRD's spec schema, as crdgen writes it


def _scalars() -> st.SearchStrategy[Any]:
    """A value of a field the schema leaves open (x-kubernetes-preserve-unknown-fields)."""
    return st.one_of(st.booleans(), st.integers(-(2**63), 2**63), st.floats(allow_nan=False),
                     st.text(max_size=12), st.sampled_from(["-1", "0", "1e9", "9223372036854775808", "true", ""]))


# Kubernetes objects a DMCluster passes through to its pods unread (the API server validates them when the
# StatefulSet is applied, and the operator reports its refusal): drawn from valid ones.
PASSED_THROUGH = {
    "template.affinity": st.sampled_from([{}, {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}}]),
    "template.tolerations[]": st.sampled_from([{"operator": "Exists"}, {
        "key": "dedicated", "operator": "Equal", "value": "dm", "effect": "NoSchedule"}]),
}


def from_schema(schema: dict[str, Any], config_keys: list[str] | None = None, path: str = "") -> st.SearchStrategy[Any]:
    """Values the structural schema admits, as an API server validates them (types, enums, patterns, bounds,
    required fields; unknown fields are pruned by the server, so none are drawn). A map of config (`config_keys`)
    gets the property names the broker knows, and values of any type."""
    if path in PASSED_THROUGH:
        return PASSED_THROUGH[path]
    if schema.get("x-kubernetes-int-or-string"):
        return st.one_of(st.integers(0, 10**6), st.from_regex(r"[0-9]{1,5}(m|Mi|Gi|k|M|G)?", fullmatch=True))
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties")
        if not properties:
            values = schema.get("additionalProperties")
            if config_keys is not None:
                keys = st.one_of(st.sampled_from(config_keys), st.text(KEY_CHARS, min_size=1, max_size=20))
                return st.dictionaries(keys, _scalars(), max_size=6)
            if isinstance(values, dict) and not values.get("x-kubernetes-preserve-unknown-fields"):
                return st.dictionaries(st.text(KEY_CHARS, min_size=1, max_size=12),
                                       from_schema(values, path=f"{path}{{}}"), max_size=3)
            return st.dictionaries(st.text(KEY_CHARS, min_size=1, max_size=12), _scalars(), max_size=3)
        required = set(schema.get("required", []))
        fields = {name: from_schema(sub, config_keys if name == "config" else None, f"{path}.{name}".lstrip("."))
                  for name, sub in properties.items()}
        return st.fixed_dictionaries({k: v for k, v in fields.items() if k in required},
                                     optional={k: v for k, v in fields.items() if k not in required})
    if kind == "array":
        return st.lists(from_schema(schema["items"], path=f"{path}[]"), min_size=schema.get("minItems", 0),
                        max_size=min(schema.get("maxItems", 4), 4))
    if kind == "string":
        low, high = schema.get("minLength", 0), schema.get("maxLength", 40)
        text = st.from_regex(schema["pattern"], fullmatch=True) if "pattern" in schema else st.text(max_size=high)
        return text.filter(lambda s: low <= len(s) <= high)
    if kind == "integer":
        low, high = schema.get("minimum", -(2**63)), schema.get("maximum", 2**63 - 1)
        return st.one_of(st.integers(low, high), st.sampled_from([low, high]))
    if kind == "number":
        return st.floats(min_value=schema.get("minimum"), allow_nan=False, allow_infinity=False,
                         exclude_min=bool(schema.get("exclusiveMinimum")))
    if kind == "boolean":
        return st.booleans()
    raise AssertionError(f"a schema type this test does not draw: {schema}")


@DRAWS
@given(raw=from_schema(_spec_schema(DMClusterSpec), sorted(BROKER_PROPERTIES)))
def test_drawn_dmcluster_specs_are_refused_or_become_valid_children(raw):
    known, _ = known_part(DMClusterSpec, raw)
    try:
        spec = DMClusterSpec.model_validate(known)
    except ValidationError:
        return  # SpecValid false, with pydantic's message
    try:
        properties = manifests.render_config(spec.config, listeners.properties(spec, "demo"))
    except ConfigError:
        properties = ""  # ConfigValid false; the brokers keep the properties they run
    listeners.needs_certificates(spec)
    listeners.secured(spec)
    children = [manifests.headless_service("demo", "ns", OWNER, spec),
                manifests.bootstrap_service("demo", "ns", OWNER, spec),
                manifests.config_map("demo", "ns", OWNER, properties),
                manifests.statefulset("demo", "ns", OWNER, spec, OperatorSettings(), replicas=spec.replicas,
                                      properties=properties)]
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    for child in children:
        kubernetes_validate.validate(child, "1.30", strict=True)


@DRAWS
@given(raw=from_schema(_spec_schema(TopicSpec), sorted(TOPIC_PROPERTIES)))
def test_drawn_topic_specs_are_refused_or_planned(raw):
    try:
        spec = TopicSpec.model_validate(known_part(TopicSpec, raw)[0])
        plan = plan_topic(spec.partitions, spec.replicas, topic_configs(spec.config), None, {0: None, 1: None})
    except (TopicRefusal, ValueError):  # the Topic's Ready condition says why (ValidationError is a ValueError)
        return
    assert plan.create


@DRAWS
@given(raw=from_schema(_spec_schema(UserSpec)))
def test_drawn_user_specs_become_acls_and_quotas(raw):
    spec = UserSpec.model_validate(known_part(UserSpec, raw)[0])  # the schema says all the model does
    for binding in user_acls.bindings("alice", spec):
        assert binding.principal == user_acls.principal("alice", spec)
    assert all(value > 0 for value in user_quotas.wanted(spec).values())
