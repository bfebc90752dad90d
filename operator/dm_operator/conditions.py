"""Kubernetes-style conditions (pure): a transition time that changes only when the status does."""

from __future__ import annotations

import datetime

from .objects import Obj


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(kind: str, ok: bool, reason: str, message: str) -> Obj:
    out = {"type": kind, "status": "True" if ok else "False", "reason": reason}
    if message:  # Kubernetes 1.20 validates an empty string in a custom resource as null
        out["message"] = message
    return out


def merge_conditions(previous: list[Obj], new: list[Obj], generation: int | None = None) -> list[Obj]:
    """`new` conditions with `lastTransitionTime` kept from `previous` when the status is the same,
    and `observedGeneration`; previous conditions of other types are dropped."""
    old = {c.get("type"): c for c in previous}
    out = []
    for c in new:
        prev = old.get(c["type"])
        same = prev is not None and prev.get("status") == c["status"]
        out.append({**c, "lastTransitionTime": prev.get("lastTransitionTime") if same and prev else now(),
                    "observedGeneration": generation})
    return out
