"""The REST Proxy's security (issue 27, ADR 0034) is the Kafka listeners': HTTP Basic against the PLAIN users
and the cluster's SCRAM credentials, HTTPS with the broker's certificates, mutual TLS with the certificate
subject as principal, and the same ACLs, refused with 401/403 in the v2 error shape. Real brokers, real
HTTP clients (requests), confluent-kafka for the admin side."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import Iterator

import pytest
import requests
from clients import ConfluentClient
from harness import free_port
from secure import Pki, add_scram_users, secure_broker

pytestmark = pytest.mark.timeout(180)

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-pw" '
        'user_bob="bob-pw";')
BINARY = "application/vnd.kafka.binary.v2+json"
V2 = "application/vnd.kafka.v2+json"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def acl(restype: str, name: str, principal: str, operation: str):
    from confluent_kafka.admin import AclBinding

    return AclBinding(restype, name, "LITERAL", principal, "*", operation, "ALLOW")


def create_acls(bootstrap: str, acls: list) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_acls(acls).values():
        future.result(15)


def records(*values: bytes) -> str:
    return json.dumps({"records": [{"value": base64.b64encode(v).decode()} for v in values]})


@pytest.fixture(scope="module")
def basic_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    rest_port = free_port()
    broker, _ = secure_broker(tmp_path_factory.mktemp("rest-basic") / "data", {"PLAINTEXT": "PLAINTEXT"}, {
        "http.listeners": f"HTTP://127.0.0.1:{rest_port}",
        "http.authentication.method": "BASIC",
        "listener.name.http.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": AUTHORIZER,
        "super.users": "User:ANONYMOUS",  # the PLAINTEXT listener: the inter-broker one and the tests' admin
    })
    broker.start()
    admin = ConfluentClient(broker.bootstrap)
    for topic in ("orders", "secret"):
        admin.create_topic(topic, 1)
    add_scram_users(broker.bootstrap, {"carol": "carol-pw"})
    create_acls(broker.bootstrap, [acl("TOPIC", "orders", "User:alice", "WRITE"),
                                   acl("TOPIC", "orders", "User:carol", "WRITE"),
                                   acl("TOPIC", "orders", "User:alice", "READ"),
                                   acl("GROUP", "alice-group", "User:alice", "READ"),
                                   acl("GROUP", "bob-group", "User:bob", "READ")])
    yield f"http://127.0.0.1:{rest_port}", broker.bootstrap
    assert broker.alive(), broker.log_tail()
    broker.stop()


def test_basic_authentication(basic_broker) -> None:
    url, _ = basic_broker
    anonymous = requests.post(url + "/topics/orders", data=records(b"x"), headers={"Content-Type": BINARY}, timeout=30)
    assert (anonymous.status_code, anonymous.json()["error_code"]) == (401, 40101)
    assert anonymous.headers["WWW-Authenticate"].startswith("Basic")
    for who in (("alice", "wrong"), ("nobody", "pw"), ("carol", "wrong-pw")):
        refused = requests.get(url + "/topics", auth=who, timeout=30)
        assert (refused.status_code, refused.json()["error_code"]) == (401, 40101), who
    garbled = requests.get(url + "/topics", headers={"Authorization": "Basic %%%"}, timeout=30)
    assert garbled.status_code == 401
    # a PLAIN user from the JAAS and a SCRAM user from the cluster's credentials
    for who in (("alice", "alice-pw"), ("carol", "carol-pw")):
        answer = requests.post(url + "/topics/orders", data=records(b"from " + who[0].encode()), auth=who,
                               headers={"Content-Type": BINARY}, timeout=30)
        assert answer.status_code == 200, answer.text
        assert answer.json()["offsets"][0]["error_code"] is None
    # health and the API description need no credentials (probes)
    assert requests.get(url + "/healthy", timeout=30).status_code == 200
    assert requests.get(url + "/openapi.json", timeout=30).status_code == 200


def test_acls_apply_to_the_http_user(basic_broker) -> None:
    url, _ = basic_broker
    denied = requests.post(url + "/topics/orders", data=records(b"x"), auth=("bob", "bob-pw"),
                           headers={"Content-Type": BINARY}, timeout=30)
    assert (denied.status_code, denied.json()["error_code"]) == (403, 40301)
    assert "orders" in denied.json()["message"]
    # metadata only shows what the user may describe (WRITE and READ imply DESCRIBE)
    assert requests.get(url + "/topics", auth=("alice", "alice-pw"), timeout=30).json() == ["orders"]
    assert requests.get(url + "/topics", auth=("bob", "bob-pw"), timeout=30).json() == []
    hidden = requests.get(url + "/topics/secret", auth=("bob", "bob-pw"), timeout=30)
    assert hidden.status_code == 403
    # consumers: group READ to create, topic READ to subscribe
    no_group = requests.post(url + "/consumers/alice-group", json={"name": "b"}, auth=("bob", "bob-pw"),
                             headers={"Content-Type": V2}, timeout=30)
    assert (no_group.status_code, no_group.json()["error_code"]) == (403, 40301)
    created = requests.post(url + "/consumers/bob-group", json={"name": "b"}, auth=("bob", "bob-pw"),
                            headers={"Content-Type": V2}, timeout=30)
    assert created.status_code == 200, created.text
    base = created.json()["base_uri"]
    no_topic = requests.post(base + "/subscription", json={"topics": ["orders"]}, auth=("bob", "bob-pw"),
                             headers={"Content-Type": V2}, timeout=30)
    assert (no_topic.status_code, no_topic.json()["error_code"]) == (403, 40301)
    # a pattern never reaches a topic the user may not read: it matches nothing for bob
    assert requests.post(base + "/subscription", json={"topic_pattern": ".*"}, auth=("bob", "bob-pw"),
                         headers={"Content-Type": V2}, timeout=30).status_code == 204
    assert requests.get(base + "/subscription", auth=("bob", "bob-pw"), timeout=30).json() == {"topics": []}
    # another user cannot use bob's instance
    stolen = requests.get(base + "/subscription", auth=("alice", "alice-pw"), timeout=30)
    assert (stolen.status_code, stolen.json()["error_code"]) == (404, 40403)
    assert requests.delete(base, auth=("bob", "bob-pw"), timeout=30).status_code == 204
    # alice may read orders through her group
    created = requests.post(url + "/consumers/alice-group", json={"name": "a", "auto.offset.reset": "earliest"},
                            auth=("alice", "alice-pw"), headers={"Content-Type": V2}, timeout=30)
    base = created.json()["base_uri"]
    assert requests.post(base + "/subscription", json={"topics": ["orders"]}, auth=("alice", "alice-pw"),
                         headers={"Content-Type": V2}, timeout=30).status_code == 204
    got: list = []
    for _ in range(20):
        got += requests.get(base + "/records?timeout=1000", auth=("alice", "alice-pw"), timeout=30).json()
        if got:
            break
    assert got and got[0]["topic"] == "orders"
    requests.delete(base, auth=("alice", "alice-pw"), timeout=30)


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Pki]]:
    base = tmp_path_factory.mktemp("rest-tls")
    ca = Pki(base / "pki")
    rest_port = free_port()
    broker, _ = secure_broker(base / "data", {"PLAINTEXT": "PLAINTEXT"}, {
        "http.listeners": f"HTTPS://127.0.0.1:{rest_port}",
        "listener.name.https.ssl.keystore.location": ca.server(),
        "listener.name.https.ssl.truststore.location": ca.ca_file,
        "listener.name.https.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([a-z]+),.*$/$1/,DEFAULT",
        "authorizer.class.name": AUTHORIZER,
        "super.users": "User:ANONYMOUS",
    })
    broker.start()
    ConfluentClient(broker.bootstrap).create_topic("mtls", 1)
    create_acls(broker.bootstrap, [acl("TOPIC", "mtls", "User:alice", "WRITE")])
    yield f"https://127.0.0.1:{rest_port}", ca
    assert broker.alive(), broker.log_tail()
    broker.stop()


def test_https_with_client_certificates(tls_broker) -> None:
    url, ca = tls_broker
    alice = ca.client("CN=alice,O=dm")
    mallory = ca.client("CN=mallory,O=dm")
    answer = requests.post(url + "/topics/mtls", data=records(b"over tls"), cert=tuple(map(str, alice)),
                           verify=str(ca.ca_file), headers={"Content-Type": BINARY}, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["offsets"][0]["offset"] == 0
    denied = requests.post(url + "/topics/mtls", data=records(b"x"), cert=tuple(map(str, mallory)),
                           verify=str(ca.ca_file), headers={"Content-Type": BINARY}, timeout=30)
    assert (denied.status_code, denied.json()["error_code"]) == (403, 40301)
    # no client certificate: the handshake is refused (with TLS 1.3 the client may only see the connection end)
    with pytest.raises((requests.exceptions.SSLError, requests.exceptions.ConnectionError)):
        requests.get(url + "/topics", verify=str(ca.ca_file), timeout=30)
    with pytest.raises(requests.exceptions.SSLError):  # the broker's certificate is checked against the CA
        requests.get(url + "/topics", cert=tuple(map(str, alice)), verify=ssl.get_default_verify_paths().cafile
                     or True, timeout=30)
