"""Tests of the operator's pieces against a real Kubernetes API server with no nodes: the testbed's
control plane (etcd, kube-apiserver, kube-controller-manager built from Debian's source package, as
local processes; testbed/dm_testbed), started once per session, with dm's CRDs installed. They need
neither Docker nor kind, so the operator's decisions are tested wherever the control plane builds."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from dm_testbed.client import Testbed, TestbedError, why_unavailable
from dm_testbed.settings import TestbedSettings

REPO = Path(__file__).resolve().parents[2]


def _this_workers_settings() -> TestbedSettings:
    """Under pytest-xdist each worker that reaches these tests starts a control plane of its own, on ports
    and in a run directory of its own: two on the same ones would collide, and the first worker done would
    stop the other's. No worker's run directory is a prefix of another's: a control plane starting cleans up
    every process whose command line mentions its run directory (testbed/dm_testbed/cleanup.py)."""
    settings = TestbedSettings.from_env()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "").removeprefix("gw")
    if not worker.isdigit():
        return settings
    offset = 10 * int(worker)  # each control plane takes two ports from each base
    return settings.model_copy(update={"run_dir": Path(f"{settings.run_dir}-gw{worker}.d"),
                                       "apiserver_port": settings.apiserver_port + offset,
                                       "etcd_port": settings.etcd_port + offset})


@pytest.fixture(scope="session")
def apiserver() -> Iterator[Testbed]:
    """The running control plane with the CRDs established: started for the session (stopped at its
    end, and by itself if this process dies), or one already running with DM_TESTBED_REUSE=1
    (`make k8s-up`). Missing binaries skip, unless DM_APISERVER_REQUIRED=1 (scripts/run-tests.sh)."""
    settings = _this_workers_settings() if os.environ.get("DM_TESTBED_REUSE") != "1" else TestbedSettings.from_env()
    if os.environ.get("DM_TESTBED_REUSE") == "1":
        try:
            tb = Testbed.attach(settings)
        except TestbedError as exc:
            pytest.skip(f"DM_TESTBED_REUSE=1 but {exc}")
        owned = False
    else:
        reason = why_unavailable(settings)
        if reason:
            if os.environ.get("DM_APISERVER_REQUIRED") == "1":
                pytest.fail(f"DM_APISERVER_REQUIRED=1 but the control plane cannot run: {reason}")
            pytest.skip(f"Kubernetes control plane unavailable: {reason}")
        tb = Testbed.start(settings, owner_pid=os.getpid())
        owned = True
    # --validate=false: kubectl 1.20's client-side schema predates x-kubernetes-validations (CEL), which
    # the API server itself accepts and ignores before 1.25.
    tb.kubectl("apply", "--validate=false", "-f", str(REPO / "crds"))
    tb.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    yield tb
    if owned:
        left = tb.stop()
        assert not left, f"the testbed left things behind: {left}"


@pytest.fixture
def namespace(apiserver: Testbed) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    apiserver.kubectl("create", "namespace", name)
    yield name
    # Nothing serves this namespace to release finalizers: strip them so the namespace can go.
    for kind in ("topics.dm.dev", "dmclusters.dm.dev", "users.dm.dev"):
        for item in apiserver.kubectl_json("get", kind, "-n", name)["items"]:
            apiserver.kubectl("patch", kind, item["metadata"]["name"], "-n", name, "--type=merge", "-p",
                              '{"metadata":{"finalizers":null}}', check=False)
    subprocess.run([apiserver.kubectl_path, "delete", "namespace", name, "--wait=false"], env=apiserver.env(),
                   capture_output=True, check=False)
