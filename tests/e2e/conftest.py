"""The e2e substrate: the testbed (default: a real control plane, pods as processes) or kind
(DM_E2E_SUBSTRATE=kind). Each test gets its own namespace."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from dm_testbed.client import Testbed, TestbedError, why_unavailable
from dm_testbed.settings import TestbedSettings
from support import dump_namespace


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def testbed() -> Iterator[Testbed]:
    """The running testbed: started once per session (stopped at its end, and by itself if this
    process dies), or an already running one with DM_TESTBED_REUSE=1 (`make k8s-up`)."""
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


@pytest.fixture
def namespace(testbed: Testbed, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    testbed.kubectl("create", "namespace", name)
    yield name
    report = request.node.stash.get(_failed_key, False)
    if report:
        out = Path(testbed.settings.run_dir) / "logs" / "failed" / request.node.name
        dump_namespace(testbed, name, out)
        print(f"namespace {name} dumped to {out}")
    testbed.kubectl("delete", "namespace", name, "--wait=false", check=False)


_failed_key = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator:
    report = yield
    if report.when == "call" and report.failed:
        item.stash[_failed_key] = True
    return report
