"""The e2e suite reads objects over one client connection (tests/e2e/kubeapi.py) where it ran a
kubectl process per poll: here its answers are compared with kubectl's on a real API server."""

from __future__ import annotations

import pytest
from kubeapi import ApiReader, NotFound

DMCLUSTER = """
apiVersion: dm.dev/v1alpha1
kind: DMCluster
metadata: {name: demo}
spec: {replicas: 1, storage: {size: 1Gi}}
"""


def test_answers_are_kubectls(apiserver, namespace) -> None:
    apiserver.kubectl("apply", "-n", namespace, "-f", "-", input=DMCLUSTER)
    for name, tier in (("a", "front"), ("b", "back")):
        apiserver.kubectl("create", "configmap", name, "-n", namespace, f"--from-literal=k={name}")
        apiserver.kubectl("label", "configmap", name, "-n", namespace, f"tier={tier}")
    reader = ApiReader(apiserver.kubeconfig)

    for alias in ("dmcluster", "dmclusters", "dmc"):
        assert reader.get(alias, "demo", "-n", namespace) == \
            apiserver.kubectl_json("get", "dmcluster", "demo", "-n", namespace)
    listed = reader.get("configmaps", "-n", namespace, "-l", "tier=back")
    expected = apiserver.kubectl_json("get", "configmaps", "-n", namespace, "-l", "tier=back")
    assert listed["items"] == expected["items"] and [i["metadata"]["name"] for i in listed["items"]] == ["b"]
    assert listed["items"][0]["kind"] == "ConfigMap" and listed["items"][0]["apiVersion"] == "v1"
    assert namespace in [n["metadata"]["name"] for n in reader.get("namespaces")["items"]]
    by_field = reader.get("cm", "-n", namespace, "--field-selector", "metadata.name=a")
    assert [i["metadata"]["name"] for i in by_field["items"]] == ["a"]

    with pytest.raises(NotFound):
        reader.get("configmap", "absent", "-n", namespace)
    with pytest.raises(ValueError, match="no resource called"):
        reader.get("nosuchthings", "-n", namespace)
