"""The e2e suite's reading of `kubectl get` arguments (tests/e2e/kubeapi.py); its answers are compared
with kubectl's against a real API server in tests/apiserver/test_e2e_api_reader.py."""

from __future__ import annotations

import pytest
from kubeapi import GetRequest, parse_get


def test_the_forms_the_scenarios_use() -> None:
    assert parse_get(("pods", "-n", "ns", "-l", "app=x,tier=y")) == GetRequest("pods", None, "ns",
                                                                             {"labelSelector": "app=x,tier=y"})
    assert parse_get(("dmcluster", "demo", "-n", "ns")) == GetRequest("dmcluster", "demo", "ns", {})
    assert parse_get(("namespaces",)) == GetRequest("namespaces", None, None, {})
    assert parse_get(("events", "--namespace", "ns", "--field-selector", "involvedObject.kind=Topic")) == \
        GetRequest("events", None, "ns", {"fieldSelector": "involvedObject.kind=Topic"})


@pytest.mark.parametrize("args", [("clusterrole,clusterrolebinding",), ("pods", "-o", "name"), ("pods/x",),
                                  ("pods", "a", "b"), (), ("pods", "--all-namespaces")])
def test_what_it_does_not_understand_is_refused(args: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match="kubeapi"):
        parse_get(args)
