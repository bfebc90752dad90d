"""DMCluster.spec.http (issue 27): the REST Proxy's broker properties, ports, pod arguments and status, as
the operator's pure functions make them; and the specs it refuses."""

from __future__ import annotations

import pytest
from dm_broker.config import BrokerConfig
from dm_broker.http.rest.server import http_listeners
from dm_operator import listeners, manifests
from dm_operator.models import DMClusterSpec
from dm_operator.settings import OperatorSettings
from pydantic import ValidationError


def spec(**http: object) -> DMClusterSpec:
    return DMClusterSpec.model_validate({"http": http} if http else {})


def test_off_unless_asked_for_and_the_default_cluster_is_unchanged() -> None:
    plain = DMClusterSpec()
    assert listeners.properties(plain, "demo") == {}
    assert listeners.http_status(plain, "demo", "ns", "cluster.local") is None
    assert [p["name"] for p in listeners.service_ports(plain, replication=False)] == ["kafka"]
    disabled = spec(enabled=False, port=8082)
    assert listeners.properties(disabled, "demo") == {}
    sts = manifests.statefulset("demo", "ns", {}, disabled, OperatorSettings(), replicas=3, properties="")
    assert not any("http.advertised" in a for a in sts["spec"]["template"]["spec"]["containers"][0]["args"])


def test_plain_http_on_the_default_listeners() -> None:
    s = spec(port=8082)
    props = listeners.properties(s, "demo")
    assert props == {"http.listeners": "HTTP://0.0.0.0:8082"}
    assert not listeners.needs_certificates(s) and not listeners.secured(s)
    assert {"name": "rest", "port": 8082, "targetPort": 8082} in listeners.service_ports(s, replication=False)
    assert {"name": "rest", "containerPort": 8082} in listeners.container_ports(s)
    sts = manifests.statefulset("demo", "ns", {}, s, OperatorSettings(), replicas=3, properties="")
    args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "http.advertised.listeners=HTTP://$(POD_NAME).demo-brokers.$(POD_NAMESPACE).svc.cluster.local:8082" \
        in args
    assert listeners.http_status(s, "demo", "ns", "cluster.local") == {
        "url": "http://demo-bootstrap.ns.svc.cluster.local:8082", "tls": False, "authentication": "none"}
    # what the operator renders, the broker accepts
    config = BrokerConfig.build(props, environ={})
    assert [li.name for li in http_listeners(config)] == ["HTTP"]


def test_https_with_client_certificates_and_basic() -> None:
    s = spec(port=8443, tls=True, authentication="tls")
    props = listeners.properties(s, "demo")
    assert props["http.listeners"] == "HTTPS://0.0.0.0:8443"
    assert props["listener.name.https.ssl.keystore.location"] == f"{listeners.CERTS_PATH}/broker.pem"
    assert props["listener.name.https.ssl.client.auth"] == "required"
    assert props["listener.name.https.ssl.truststore.location"] == f"{listeners.CLIENTS_CA_PATH}/ca.crt"
    assert listeners.needs_certificates(s) and not listeners.secured(s)  # the Kafka side stays as it was
    assert listeners.uses_clients_ca(s)
    sts = manifests.statefulset("demo", "ns", {}, s, OperatorSettings(), replicas=3, properties="")
    mounts = {m["mountPath"] for m in sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    assert {listeners.CERTS_PATH, listeners.CLIENTS_CA_PATH} <= mounts
    assert listeners.http_status(s, "demo", "ns", "cluster.local")["url"].startswith("https://")
    basic = listeners.properties(spec(authentication="basic"), "demo")
    assert basic["http.authentication.method"] == "BASIC"
    # with secured Kafka listeners, the REST Proxy's properties come on top of theirs
    both = DMClusterSpec.model_validate({"listeners": [{"name": "tls", "port": 9093, "tls": True}],
                                         "http": {"port": 8082}})
    props = listeners.properties(both, "demo")
    assert props["http.listeners"] == "HTTP://0.0.0.0:8082" and "TLS://0.0.0.0:9093" in props["listeners"]
    assert {"rest", "tls"} <= {p["name"] for p in listeners.service_ports(both, replication=False)}


@pytest.mark.parametrize(("http", "message"), [
    ({"port": 8080}, "port 8080 is the operator's"),
    ({"port": 9092}, "port 9092 is a listener's"),
    ({"authentication": "tls"}, "authentication tls needs tls: true"),
    ({"authentication": "digest"}, "authentication"),
    ({"port": 80}, "greater than or equal to 1024"),
])
def test_invalid_http_specs_are_refused(http: dict, message: str) -> None:
    with pytest.raises(ValidationError) as refused:
        DMClusterSpec.model_validate({"http": http})
    assert message in str(refused.value)


def test_the_operator_sets_the_rest_properties() -> None:
    with pytest.raises(Exception) as refused:
        manifests.render_config({"http.listeners": "HTTP://0.0.0.0:1"})
    assert "http.listeners is set by the operator" in str(refused.value)
