"""The e2e suite runs on a kind cluster with the real image (tests/e2e/substrate.py). Scenario tests
get a namespace of their own, served by one operator installed from the Helm chart for the session.
Without a cluster the tests skip with the reason, unless DM_E2E_REQUIRED=1 (set by
scripts/run-tests.sh once it has created the cluster): then a missing cluster is a failure.

Under pytest-xdist (`-n 2 --dist loadgroup`, as scripts/run-tests.sh runs them) scenarios run side by
side; those marked `e2e_exclusive` (they stop the operator, or stop or cordon a node) run alone, one after
the other on one worker (tests/e2e/sharing.py)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from dm import OPERATOR_NAMESPACE, install_operator
from sharing import ClusterHold, SharedInstallation, run_directory
from substrate import Substrate, kind_substrate, kind_unavailable
from support import create_namespace, dump_namespace, wait_until

EXCLUSIVE = "e2e_exclusive"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)
            if item.get_closest_marker(EXCLUSIVE):
                item.add_marker(pytest.mark.xdist_group("cluster-wide"))  # one worker, one after another


_hold: ClusterHold | None = None


def _needs_cluster(item: pytest.Item | None) -> bool:
    return item is not None and "substrate" in getattr(item, "fixturenames", ())


def _exclusive(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker(EXCLUSIVE) is not None


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator:
    """Takes the cluster hold before the test's timeout starts (waiting for an exclusive scenario is not
    the test's time) and gives it up after the test's teardown, unless the next test is exclusive too."""
    global _hold
    if not _needs_cluster(item):
        return (yield)
    if _hold is None:
        _hold = ClusterHold(run_directory())
    _hold.take(exclusive=_exclusive(item))
    try:
        return (yield)
    finally:
        if not (_exclusive(item) and _exclusive(nextitem)):
            _hold.release()


@pytest.fixture(scope="session")
def substrate(tmp_path_factory: pytest.TempPathFactory) -> Substrate:
    reason = kind_unavailable()
    if reason:
        if os.environ.get("DM_E2E_REQUIRED") == "1":
            pytest.fail(f"DM_E2E_REQUIRED=1 but {reason}")
        pytest.skip(reason)
    return kind_substrate(tmp_path_factory.mktemp("kind"))


@pytest.fixture(scope="session")
def operator(substrate: Substrate) -> Iterator[Substrate]:
    """The dm operator, installed with the Helm chart into dm-system, serving every e2e-* namespace
    (installed by the first xdist worker that needs it, uninstalled by the last)."""
    installation = SharedInstallation(run_directory(), "operator")
    installation.join(lambda: install_operator(substrate))
    yield substrate
    installation.leave(lambda: _uninstall_operator(substrate))


def _uninstall_operator(substrate: Substrate) -> None:
    # Every scenario's namespace must go while the operator still runs: one held by anything the
    # operator put there would hang a user's `kubectl delete namespace` the same way.
    try:
        wait_until(lambda: not _e2e_namespaces_left(substrate), 180, "the e2e namespaces to be deleted")
    finally:
        left = _e2e_namespaces_left(substrate)
        substrate.helm("uninstall", "dm", "-n", OPERATOR_NAMESPACE, "--wait", check=False)
    assert not left, f"namespaces still terminating: {left}"


def _e2e_namespaces_left(k: Substrate) -> dict[str, list[str]]:
    """The e2e namespaces still there, with what holds each (the namespace's True conditions)."""
    listing = k.get("namespaces")
    return {n["metadata"]["name"]: [c.get("message", "") for c in n.get("status", {}).get("conditions", [])
                                    if c.get("status") == "True"]
            for n in listing["items"] if n["metadata"]["name"].startswith("e2e-")}


_failed_key = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator:
    report = yield
    if report.when == "call" and report.failed:
        item.stash[_failed_key] = True
    return report


def _namespace(k, request: pytest.FixtureRequest, prefix: str) -> Iterator[str]:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    create_namespace(k, name)
    yield name
    if request.node.stash.get(_failed_key, False):
        out = Path(os.environ.get("DM_E2E_DUMP", "/tmp/dm-e2e-failures")) / request.node.name
        dump_namespace(k, name, out)
        dump_namespace(k, OPERATOR_NAMESPACE, out / "operator")
        print(f"namespace {name} dumped to {out}")
    k.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def e2e_namespace(operator: Substrate, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace the session's operator serves."""
    yield from _namespace(operator, request, "e2e")
