"""Growing the brokers' volumes to `spec.storage.size` (pure logic; the runtime patches the claims).

A StatefulSet's volume claim templates cannot change, but its claims can grow where their storage
class allows expansion (`allowVolumeExpansion: true`), as Strimzi grows its brokers' claims. Every
claim of the cluster smaller than the spec is asked for the new size, including one a scale-up made
later from the old template. A volume never shrinks: a smaller size is reported, not applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from .conditions import condition

Obj = dict[str, Any]
RESIZE_CONDITIONS = ("Resizing", "FileSystemResizePending")


def _quantity(value: object) -> Decimal | None:
    try:
        return parse_quantity(value) if value is not None else None
    except ValueError:
        return None


@dataclass
class VolumePlan:
    size: str
    grow: list[str] = field(default_factory=list)  # requested below the spec: patched to it
    larger: list[str] = field(default_factory=list)  # requested above the spec: left as they are
    waiting: list[str] = field(default_factory=list)  # requested, not yet that large (or resizing)
    # FileSystemResizePending (offline expansion): claim -> when its file system began to wait for a restart
    pending_since: dict[str, str] = field(default_factory=dict)

    @property
    def restart_needed(self) -> list[str]:
        return list(self.pending_since)


def plan(size: str, claims: list[Obj]) -> VolumePlan:
    desired = parse_quantity(size)
    result = VolumePlan(size)
    for claim in sorted(claims, key=lambda c: c["metadata"]["name"]):
        name = claim["metadata"]["name"]
        status = claim.get("status") or {}
        if status.get("phase") != "Bound":
            continue  # only a bound claim can grow; a new one is asked once its volume is there
        requested = _quantity(((claim.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage"))
        capacity = _quantity((status.get("capacity") or {}).get("storage"))
        conditions = {c.get("type"): c for c in status.get("conditions") or []}
        resizing = set(conditions) & set(RESIZE_CONDITIONS)
        if requested is None or requested < desired:
            result.grow.append(name)
        elif requested > desired:
            result.larger.append(name)
        if capacity is None or capacity < min(desired, requested or desired) or resizing:
            result.waiting.append(name)
        if "FileSystemResizePending" in resizing:
            result.pending_since[name] = conditions["FileSystemResizePending"].get("lastTransitionTime") or ""
    return result


def restarts_for_file_systems(result: VolumePlan, claim_prefix: str, pods_created: dict[int, str]) -> set[int]:
    """Brokers whose pod must restart for its volume's file system to grow (offline expansion): those whose
    claim waits for it and whose pod was created before the wait began. A pod created since mounts the grown
    volume and resizes it, so it is not restarted again while the kubelet is at it."""
    brokers = set()
    for name in result.pending_since:
        broker_id = int(name.removeprefix(claim_prefix))
        created = pods_created.get(broker_id)
        if created is not None and created < result.pending_since.get(name, ""):
            brokers.add(broker_id)
    return brokers


def volumes_condition(result: VolumePlan, refused: dict[str, str]) -> Obj:
    """The DMCluster's `VolumesExpanded` condition after the claims were asked (refused: claim → the API
    server's answer)."""
    if refused:
        names = ", ".join(sorted(refused))
        first = next(iter(refused.values()))
        return condition("VolumesExpanded", False, "ExpansionRefused",
                         f"claims {names} cannot grow to {result.size}: {first}"[:1000])
    if result.larger:
        return condition("VolumesExpanded", False, "ShrinkNotSupported",
                         f"claims {', '.join(result.larger)} are larger than {result.size}; volumes never shrink, "
                         "set spec.storage.size back to at least their size")
    pending = [n for n in result.grow + result.waiting if n not in result.restart_needed]
    if result.restart_needed:
        return condition("VolumesExpanded", False, "FileSystemResizePending",
                         f"claims {', '.join(result.restart_needed)} have grown; their file systems grow as their "
                         "brokers' pods restart, one at a time (RollingRestart)")
    if pending:
        return condition("VolumesExpanded", False, "Expanding",
                         f"claims {', '.join(sorted(set(pending)))} asked for {result.size}; waiting for the "
                         "storage provider")
    return condition("VolumesExpanded", True, "AtSize", f"every broker volume has {result.size}")
