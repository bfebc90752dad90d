"""The e2e substrate: the testbed (default: a real control plane, pods as processes) or kind
(DM_E2E_SUBSTRATE=kind). Scenario tests get a namespace of their own, served by one operator
installed from the Helm chart for the session."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from dm import OPERATOR_NAMESPACE, install_operator
from dm_testbed.client import Testbed, TestbedError, why_unavailable
from dm_testbed.settings import TestbedSettings
from substrate import Substrate, kind_substrate, kind_unavailable, testbed_substrate
from support import dump_namespace

SUBSTRATE = os.environ.get("DM_E2E_SUBSTRATE", "testbed")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def testbed() -> Iterator[Testbed]:
    """The running testbed: started once per session (stopped at its end, and by itself if this
    process dies), or an already running one with DM_TESTBED_REUSE=1 (`make k8s-up`)."""
    if SUBSTRATE != "testbed":
        pytest.skip(f"testbed tests do not run on the {SUBSTRATE} substrate")
    settings = TestbedSettings.from_env()
    if os.environ.get("DM_TESTBED_REUSE") == "1":
        try:
            yield Testbed.attach(settings)
            return
        except TestbedError as exc:
            pytest.skip(f"DM_TESTBED_REUSE=1 but {exc}")
    reason = why_unavailable(settings)
    if reason:
        pytest.skip(f"Kubernetes testbed unavailable: {reason}")
    tb = Testbed.start(settings, owner_pid=os.getpid())
    yield tb
    left = tb.stop()
    assert not left, f"the testbed left things behind: {left}"


@pytest.fixture(scope="session")
def substrate(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Substrate:
    if SUBSTRATE == "kind":
        reason = kind_unavailable()
        if reason:
            pytest.skip(reason)
        return kind_substrate(tmp_path_factory.mktemp("kind"))
    if SUBSTRATE != "testbed":
        pytest.fail(f"DM_E2E_SUBSTRATE={SUBSTRATE!r}: expected testbed or kind")
    return testbed_substrate(request.getfixturevalue("testbed"))


@pytest.fixture(scope="session")
def operator(substrate: Substrate) -> Iterator[Substrate]:
    """The dm operator, installed with the Helm chart into dm-system, serving every e2e-* namespace."""
    install_operator(substrate)
    yield substrate
    substrate.helm("uninstall", "dm", "-n", OPERATOR_NAMESPACE, "--wait", check=False)


_failed_key = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator:
    report = yield
    if report.when == "call" and report.failed:
        item.stash[_failed_key] = True
    return report


def _namespace(k, request: pytest.FixtureRequest, prefix: str) -> Iterator[str]:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    k.kubectl("create", "namespace", name)
    yield name
    if request.node.stash.get(_failed_key, False):
        out = Path(os.environ.get("DM_E2E_DUMP", "/tmp/dm-e2e-failures")) / request.node.name
        dump_namespace(k, name, out)
        dump_namespace(k, OPERATOR_NAMESPACE, out / "operator")
        print(f"namespace {name} dumped to {out}")
    k.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def namespace(testbed: Testbed, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace the operator does not serve (tests of the testbed itself)."""
    yield from _namespace(testbed, request, "t")


@pytest.fixture
def e2e_namespace(operator: Substrate, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace the session's operator serves."""
    yield from _namespace(operator, request, "e2e")
