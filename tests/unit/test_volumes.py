"""Which broker claims grow to spec.storage.size, and what the DMCluster's VolumesExpanded condition says."""

from __future__ import annotations

from dm_operator import volumes


def claim(name: str, requested: str, capacity: str | None = None, phase: str = "Bound",
          conditions: tuple[str, ...] = ()) -> dict:
    status: dict = {"phase": phase, "conditions": [{"type": c, "status": "True"} for c in conditions]}
    if capacity is not None:
        status["capacity"] = {"storage": capacity}
    return {"metadata": {"name": name}, "spec": {"resources": {"requests": {"storage": requested}}}, "status": status}


def reason(size: str, claims: list[dict], refused: dict[str, str] | None = None) -> str:
    return volumes.volumes_condition(volumes.plan(size, claims), refused or {})["reason"]


def test_claims_below_the_size_grow_and_units_compare_as_quantities():
    plan = volumes.plan("2Gi", [claim("b", "1Gi", "1Gi"), claim("a", "2048Mi", "2Gi"), claim("c", "1.5G", "1.5G")])
    assert plan.grow == ["b", "c"] and not plan.larger
    assert reason("2Gi", [claim("a", "2048Mi", "2Gi")]) == "AtSize"


def test_a_claim_not_yet_bound_is_left_for_a_later_pass():
    plan = volumes.plan("2Gi", [claim("new", "1Gi", phase="Pending")])
    assert plan.grow == [] and plan.waiting == []
    assert reason("2Gi", [claim("new", "1Gi", phase="Pending")]) == "AtSize"


def test_waiting_for_the_provider_then_for_a_restart():
    assert reason("2Gi", [claim("a", "2Gi", "1Gi")]) == "Expanding"
    assert reason("2Gi", [claim("a", "2Gi", "1Gi", conditions=("Resizing",))]) == "Expanding"
    pending = volumes.volumes_condition(
        volumes.plan("2Gi", [claim("a", "2Gi", "2Gi", conditions=("FileSystemResizePending",))]), {})
    assert pending["reason"] == "FileSystemResizePending" and "restart" in pending["message"]


def test_volumes_never_shrink_and_a_refusal_comes_first():
    assert reason("1Gi", [claim("a", "2Gi", "2Gi")]) == "ShrinkNotSupported"
    assert volumes.plan("1Gi", [claim("a", "2Gi", "2Gi")]).grow == []
    refused = volumes.volumes_condition(volumes.plan("4Gi", [claim("a", "2Gi", "2Gi")]), {"a": "forbidden: no resize"})
    assert refused["reason"] == "ExpansionRefused" and "forbidden: no resize" in refused["message"]


def test_a_broker_restarts_for_its_file_system_only_if_its_pod_is_older_than_the_wait():
    waiting = claim("data-c-broker-1", "2Gi", "2Gi", conditions=("FileSystemResizePending",))
    waiting["status"]["conditions"][0]["lastTransitionTime"] = "2026-11-27T10:00:05Z"
    plan = volumes.plan("2Gi", [claim("data-c-broker-0", "2Gi", "2Gi"), waiting])
    older = {0: "2026-11-27T09:00:00Z", 1: "2026-11-27T09:00:00Z"}
    assert volumes.restarts_for_file_systems(plan, "data-c-broker-", older) == {1}
    newer = {0: "2026-11-27T09:00:00Z", 1: "2026-11-27T10:00:06Z"}  # made since: it resizes as it mounts
    assert volumes.restarts_for_file_systems(plan, "data-c-broker-", newer) == set()
    assert volumes.restarts_for_file_systems(plan, "data-c-broker-", {0: "2026-11-27T09:00:00Z"}) == set()


def test_a_restart_for_a_file_system_is_one_step_of_the_roll():
    from dm_operator.planning import BrokerPod, next_roll_step

    pods = [BrokerPod(0, True, "r1"), BrokerPod(1, True, "r1", restart_for="grow")]
    assert next_roll_step("r1", pods, 2, {}, 1).restart == 1
    assert next_roll_step("r1", [BrokerPod(0, True, "r1"), BrokerPod(1, True, "r1")], 2, {}, 1).restart is None
    assert next_roll_step("r1", [BrokerPod(0, False, "r1"), BrokerPod(1, True, "r1", restart_for="grow")], 2, {},
                          1).restart is None  # one at a time: broker 0 is not Ready yet


def test_a_brokers_last_failure_comes_from_its_container_state():
    from dm_operator.status import LAST_FAILURE_CHARS, last_failure

    def pod(state: dict, last: dict) -> dict:
        return {"status": {"containerStatuses": [{"name": "broker", "state": state, "lastState": last}]}}

    stopped = {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": "T", "message": "full\nvolume"}}
    assert last_failure(pod({"waiting": {"reason": "CrashLoopBackOff"}}, stopped)) == "T: exit 1 (Error): full volume"
    assert last_failure(pod(stopped, {})) == "T: exit 1 (Error): full volume"  # down right now
    clean = {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": "T"}}
    assert last_failure(pod({"running": {}}, clean)) is None and last_failure(None) is None
    long = {"terminated": {"exitCode": 137, "reason": "OOMKilled", "finishedAt": "T", "message": "x" * 2000}}
    assert len(last_failure(pod({"running": {}}, long))) == LAST_FAILURE_CHARS
