"""Every pod the chart or the operator makes passes Pod Security "restricted" (the static check of
tests/pod_security.py; the e2e namespaces also carry the enforce label where the API server serves the
admission plugin, 1.23+). The chart is rendered with Helm in several configurations."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from dm_operator import manifests
from dm_operator.models import DMClusterSpec
from dm_operator.settings import OperatorSettings
from pod_security import pod_specs, restricted_violations

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("DM_TESTBED_CACHE", Path.home() / ".cache" / "dm-testbed"))


def helm() -> str:
    found = shutil.which("helm") or next((str(p) for p in CACHE.glob("kubernetes-*/bin/helm")), None)
    if found is None:
        pytest.skip("helm is not installed (make test installs it: scripts/helm-install.sh)")
    return found


@pytest.mark.parametrize("values", [
    [],
    ["--set", "watch.allNamespaces=true", "--set", "operator.replicas=3"],
    ["--set", "imagePullSecrets[0].name=reg", "--set", "cluster.replicas=5"],
])
def test_every_pod_of_the_chart_is_restricted(values: list[str]):
    out = subprocess.run([helm(), "template", "dm", str(REPO / "charts" / "dm-cluster"), "-n", "dm-system",
                          *values], capture_output=True, text=True, check=True).stdout
    pods = [p for doc in yaml.safe_load_all(out) if doc for p in pod_specs(doc)]
    # The operator, the uninstall hook's Job and the helm test pod.
    assert {name.split()[0] for name, _ in pods} == {"Deployment", "Job", "Pod"}, pods
    for name, spec in pods:
        assert restricted_violations(spec) == [], name


def test_the_broker_statefulset_is_restricted():
    spec = DMClusterSpec.model_validate({"replicas": 3, "template": {"tolerations": [{"operator": "Exists"}]}})
    sts = manifests.statefulset("c", "ns", {}, spec, OperatorSettings(), replicas=3, properties="")
    [(_, pod)] = pod_specs(sts)
    assert restricted_violations(pod) == []


def test_the_check_finds_what_restricted_refuses():
    pod = {"securityContext": {"runAsNonRoot": True},
           "volumes": [{"name": "h", "hostPath": {"path": "/"}}],
           "containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}},
                           "ports": [{"containerPort": 80, "hostPort": 80}]}]}
    found = "\n".join(restricted_violations(pod))
    for expected in ("hostPath", "allowPrivilegeEscalation", "drop ALL", "NET_ADMIN", "hostPort", "seccompProfile"):
        assert expected in found
