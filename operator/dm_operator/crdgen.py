"""CustomResourceDefinitions from the pydantic models: structural OpenAPI v3 schemas (types,
defaults, minimums, enums, descriptions), status and scale subresources, printer columns, short
names. `python -m dm_operator.crdgen` writes crds/*.yaml and the chart's copy; a test keeps them
equal to the models."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from . import GROUP, VERSION
from .models import CRDS, SCHEMA_VERSION, CrdInfo

SCHEMA_ANNOTATION = "dm.dev/schema-hash"
VERSION_ANNOTATION = "dm.dev/schema-version"
REPO = Path(__file__).resolve().parents[2]
CRD_DIRS = [REPO / "crds", REPO / "charts" / "dm-cluster" / "crds"]  # Helm installs the chart's copy first


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    """Inlines $refs (structural schemas have none) and drops what Kubernetes does not take."""
    if isinstance(node, list):
        return [_resolve(x, defs) for x in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _resolve(merged, defs)
    return {k: _resolve(v, defs) for k, v in node.items() if k not in ("title", "$defs")}


def _structural(node: dict[str, Any], in_status: bool) -> dict[str, Any]:
    node = dict(node)
    any_of = node.pop("anyOf", None)
    if any_of is not None:
        types = [x for x in any_of if x.get("type") != "null"]
        nullable = len(types) < len(any_of)
        if len(types) == 1:
            node = {**types[0], **node}
        elif {t.get("type") for t in types} == {"string", "integer"}:
            node["x-kubernetes-int-or-string"] = True
        else:
            node["x-kubernetes-preserve-unknown-fields"] = True
        if nullable:
            node["nullable"] = True
    if "const" in node:  # Kubernetes' schemas have no `const` (a one-value Literal): a one-item enum says the same
        node["enum"] = [node.pop("const")]
    for bound, flag in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(node.get(bound), int | float) and not isinstance(node.get(bound), bool):
            # JSON Schema 2020's numeric exclusive bound is OpenAPI v3's bound plus a boolean (`gt=0`)
            node[flag] = node.pop(bound)
            node[bound] = True
    if node.get("default", "missing") is None or in_status:
        node.pop("default", None)
    kind = node.get("type")
    if kind == "object" or "properties" in node:
        extra = node.pop("additionalProperties", None)
        props = node.get("properties")
        if props:
            node["properties"] = {k: _structural(v, in_status) for k, v in props.items()}
            required = set(node.get("required", []))
            for name, prop in node["properties"].items():
                # Defaulting reaches nested fields only when their object exists.
                if (name not in required and prop.get("properties") and "default" not in prop
                        and not prop.get("nullable") and not in_status):
                    prop["default"] = {}
        elif extra is True or extra == {}:
            node["additionalProperties"] = {"x-kubernetes-preserve-unknown-fields": True}
        elif isinstance(extra, dict):
            node["additionalProperties"] = _structural(extra, in_status)
        elif not props:
            node["x-kubernetes-preserve-unknown-fields"] = True
        node["type"] = "object"
    if kind == "array" and "items" in node:
        node["items"] = _structural(node["items"], in_status)
    if not node.get("type") and not node.get("x-kubernetes-int-or-string") and \
            not node.get("x-kubernetes-preserve-unknown-fields"):
        node["x-kubernetes-preserve-unknown-fields"] = True
    return node


def schema_of(model: type, in_status: bool) -> dict[str, Any]:
    raw = model.model_json_schema(mode="validation")
    return _structural(_resolve(raw, raw.get("$defs", {})), in_status)


def schema_hash(info: CrdInfo) -> str:
    """Identifies the schema an operator generates, so it can tell whether the CRD is its own."""
    return hashlib.sha256(json.dumps(crd(info, annotate=False), sort_keys=True).encode()).hexdigest()[:16]


def crd(info: CrdInfo, annotate: bool = True) -> dict[str, Any]:
    spec_schema = schema_of(info.spec, False)
    status_schema = schema_of(info.status, True)
    spec_schema["description"] = f"Desired state of the {info.kind}."
    status_schema["description"] = f"Observed state of the {info.kind}, written by the dm operator."
    version: dict[str, Any] = {
        "name": VERSION, "served": True, "storage": True,
        "schema": {"openAPIV3Schema": {
            "type": "object", "description": info.description, "required": ["spec"],
            "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                           "metadata": {"type": "object"}, "spec": spec_schema, "status": status_schema},
        }},
        "subresources": {"status": {}},
        "additionalPrinterColumns": info.printer_columns,
    }
    if info.scale:
        version["subresources"]["scale"] = info.scale
    metadata: dict[str, Any] = {"name": f"{info.plural}.{GROUP}",
                                "labels": {"app.kubernetes.io/name": "dm", "app.kubernetes.io/component": "crd"}}
    if annotate:
        metadata["annotations"] = {SCHEMA_ANNOTATION: schema_hash(info), VERSION_ANNOTATION: SCHEMA_VERSION}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": GROUP, "scope": "Namespaced",
            "names": {"kind": info.kind, "listKind": f"{info.kind}List", "plural": info.plural,
                      "singular": info.singular, "shortNames": info.short_names, "categories": ["dm"]},
            "versions": [version],
        },
    }


def render(info: CrdInfo) -> str:
    header = "# Generated from operator/dm_operator/models.py by `python -m dm_operator.crdgen`; do not edit.\n"
    return header + yaml.safe_dump(crd(info), sort_keys=False, width=120)


def files() -> dict[str, str]:
    return {f"{GROUP}_{info.plural}.yaml": render(info) for info in CRDS}


def main() -> None:
    targets = [Path(sys.argv[1])] if len(sys.argv) > 1 else CRD_DIRS
    for target in targets:
        target.mkdir(parents=True, exist_ok=True)
        for name, text in files().items():
            (target / name).write_text(text)
            print(f"wrote {target / name}")


if __name__ == "__main__":
    main()
