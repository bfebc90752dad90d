"""A namespace deleted while no operator watches it: kopf never watches a namespace that is already
terminating with finalizers left, so the operator releases the Topics' and Users' finalizers of the
namespaces it serves when it starts (and stops) — and leaves the namespaces it does not serve alone."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from dm_operator.kube import Kube
from dm_operator.topics import release_in_terminating_namespaces, served
from dm_testbed.client import Testbed
from kubernetes import config


def test_served_follows_kopfs_namespace_patterns():
    assert served("anything", [])
    assert served("e2e-1", ["e2e-*"]) and not served("prod", ["e2e-*"])
    assert served("a", ["x,a"]) and not served("e2e-skip", ["e2e-*", "!e2e-skip"])


def _terminating_with_finalizers(tb: Testbed, ns: str) -> None:
    tb.kubectl("create", "namespace", ns)
    for kind, name, spec, finalizer in (
            ("Topic", "t", {"cluster": "gone", "partitions": 1, "replicas": 1}, "dm.dev/topic"),
            ("User", "u", {"cluster": "gone", "authentication": {"type": "scram-sha-512"}}, "dm.dev/user")):
        tb.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(
            {"apiVersion": "dm.dev/v1alpha1", "kind": kind,
             "metadata": {"name": name, "finalizers": [finalizer]}, "spec": spec}))
    tb.kubectl("delete", "namespace", ns, "--wait=false")


def test_namespaces_terminating_before_the_operator_started_are_released(apiserver: Testbed):
    tb = apiserver
    tag = uuid.uuid4().hex[:6]
    served_ns, other_ns = f"gone-{tag}", f"kept-{tag}"
    for ns in (served_ns, other_ns):
        _terminating_with_finalizers(tb, ns)
    try:
        deadline = time.monotonic() + 30
        while any(tb.kubectl_json("get", "namespace", ns)["status"].get("phase") != "Terminating"
                  for ns in (served_ns, other_ns)):
            assert time.monotonic() < deadline, "the namespaces never became Terminating"
            time.sleep(0.2)

        kube = Kube(config.new_client_from_config(str(tb.kubeconfig)), threads=2)
        try:
            asyncio.run(release_in_terminating_namespaces(kube, ["gone-*"]))
        finally:
            kube.close()
        deadline = time.monotonic() + 60
        while tb.kubectl("get", "namespace", served_ns, check=False).returncode == 0:
            assert time.monotonic() < deadline, "the served namespace is still there"
            time.sleep(0.2)
        for kind in ("topic", "user"):  # a namespace it does not serve is not its business
            items = tb.kubectl_json("get", kind, "-n", other_ns)["items"]
            assert len(items) == 1 and items[0]["metadata"]["finalizers"] == [f"dm.dev/{kind}"], items
    finally:
        for kind in ("topics.dm.dev", "users.dm.dev"):
            for item in tb.kubectl_json("get", kind, "-n", other_ns)["items"]:
                tb.kubectl("patch", kind, item["metadata"]["name"], "-n", other_ns, "--type=merge", "-p",
                           '{"metadata":{"finalizers":null}}', check=False)
