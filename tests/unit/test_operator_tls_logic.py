"""The operator's pure security logic: listeners into broker properties, CA and certificate decisions
(renewal keeps the key, so what the renewed CA signs verifies against the old certificate in a real
TLS handshake), and Users' ACLs."""

from __future__ import annotations

import asyncio
import datetime
import ssl
import tempfile
from pathlib import Path

import pytest
from dm_broker.security import pki
from dm_broker.security.acls import Operation, PatternType, Permission, ResourceType
from dm_operator import certificates, listeners
from dm_operator.models import DMClusterSpec, UserSpec
from dm_operator.user_acls import bindings, diff, principal
from pydantic import ValidationError

DAY = datetime.timedelta(days=1)
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def spec(**values) -> DMClusterSpec:
    return DMClusterSpec.model_validate(values)


def test_the_default_listener_keeps_the_shorthand():
    s = spec()
    assert listeners.is_default(s) and not listeners.secured(s)
    assert listeners.properties(s, "demo") == {} and listeners.advertised(s, "demo", "cluster.local") is None
    assert listeners.service_ports(s, replication=True) == [{"name": "kafka", "port": 9092, "targetPort": "kafka"}]


def test_secured_listeners_become_kafka_properties():
    s = spec(listeners=[{"name": "plain", "port": 9092}, {"name": "tls", "port": 9093, "tls": True,
                                                          "authentication": "scram-sha-512"},
                        {"name": "mtls", "port": 9094, "tls": True, "authentication": "tls"}],
             authorization={"superUsers": ["User:ops"]})
    props = listeners.properties(s, "demo")
    assert props["listeners"] == ("REPLICATION://0.0.0.0:9091,PLAIN://0.0.0.0:9092,TLS://0.0.0.0:9093,"
                                  "MTLS://0.0.0.0:9094")
    assert props["listener.security.protocol.map"] == "REPLICATION:SSL,PLAIN:PLAINTEXT,TLS:SASL_SSL,MTLS:SSL"
    assert props["inter.broker.listener.name"] == "REPLICATION"
    assert props["listener.name.replication.ssl.client.auth"] == "required"
    assert props["listener.name.tls.sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert props["listener.name.mtls.ssl.truststore.location"] == "/etc/dm/clients-ca/ca.crt"
    assert props["super.users"] == "User:CN=demo-broker,O=dm.dev;User:ops"
    assert props["authorizer.class.name"].endswith("StandardAuthorizer")
    assert listeners.advertised(s, "demo", "cluster.local").startswith(
        "REPLICATION://$(POD_NAME).demo-brokers.$(POD_NAMESPACE).svc.cluster.local:9091,")
    assert [p["port"] for p in listeners.service_ports(s, replication=False)] == [9092, 9093, 9094]
    assert [p["port"] for p in listeners.service_ports(s, replication=True)] == [9091, 9092, 9093, 9094]
    # and the broker accepts what the operator renders
    from dm_broker.config import BrokerConfig
    from dm_broker.security.listeners import listener_setup

    setup = listener_setup(BrokerConfig.build({**props, "advertised.listeners": listeners.advertised(
        s, "demo", "cluster.local").replace("$(POD_NAME)", "demo-broker-0").replace("$(POD_NAMESPACE)", "ns")},
        environ={}))
    assert setup.inter_broker == "REPLICATION" and len(setup.listeners) == 4


@pytest.mark.parametrize("listeners_spec, message", [
    ([{"name": "a", "port": 9092}, {"name": "a", "port": 9093}], "names must differ"),
    ([{"name": "a", "port": 9092}, {"name": "b", "port": 9092}], "ports must differ"),
    ([{"name": "a", "port": 9091}], "operator's"),
    ([{"name": "a", "port": 9093, "authentication": "tls"}], "needs tls"),
    ([{"name": "replication", "port": 9093}], "operator's"),
    ([{"name": "Bad", "port": 9093}], "pattern"),
])
def test_listener_specs_that_are_refused(listeners_spec, message):
    with pytest.raises(ValidationError, match=message):
        spec(listeners=listeners_spec)


@pytest.mark.parametrize("ca", [
    {"renewBefore": "1000000000d"},  # past what a timedelta holds: an OverflowError, which failed every pass
    {"validity": "3000000d", "renewBefore": "720h"},  # a certificate's dates past the year 9999
    {"validity": "36501d"},
])
def test_durations_longer_than_a_century_are_an_invalid_spec(ca):
    """Found by drawing DMCluster specs from the CRD's schema (hypothesis-jsonschema, 2026-12-02): the CRD's
    pattern allows any number of days, and an OverflowError is no ValueError, so the spec was not reported
    invalid (SpecValid false) and every reconcile pass failed on it instead."""
    for field in ("clusterCa", "clientsCa"):
        with pytest.raises(ValidationError, match="longer than 100 years"):
            spec(**{field: ca})
    assert spec(clusterCa={"validity": "36500d"}).clusterCa.validity == "36500d"


def test_a_ca_is_made_kept_and_renewed_with_the_same_key():
    made = certificates.plan_ca(None, "", "CN=c", True, 10 * DAY, 2 * DAY, at=T0)
    assert made is not None and made.reason == "created" and len(made.ca.bundle) == 1
    kept = certificates.plan_ca(made.ca.pair, made.ca.bundle_pem, "CN=c", True, 10 * DAY, 2 * DAY, at=T0 + DAY)
    assert kept is not None and not kept.changed
    renewed = certificates.plan_ca(made.ca.pair, made.ca.bundle_pem, "CN=c", True, 10 * DAY, 2 * DAY,
                                   at=T0 + 9 * DAY)
    assert renewed is not None and renewed.reason == "renewed"
    assert renewed.ca.pair.key_pem == made.ca.pair.key_pem  # the same key
    assert renewed.ca.pair.not_after > made.ca.pair.not_after
    assert len(renewed.ca.bundle) == 2  # the old certificate stays trusted until it expires
    later = certificates.plan_ca(renewed.ca.pair, renewed.ca.bundle_pem, "CN=c", True, 10 * DAY, 2 * DAY,
                                 at=T0 + 11 * DAY)
    assert later is not None and later.changed and len(later.ca.bundle) == 1  # the expired one left
    assert certificates.plan_ca(None, "", "CN=c", False, 10 * DAY, 2 * DAY) is None  # bring your own


def test_what_a_renewed_ca_signs_verifies_against_the_old_certificate(tmp_path: Path):
    """Brokers and clients that still hold only the old CA certificate accept a certificate the
    renewed CA signed: a real TLS handshake."""
    old = pki.new_ca("CN=cluster-ca", 30 * DAY)
    renewed = certificates.renew_ca(old, 30 * DAY)
    server = pki.issue(renewed, "CN=broker", 10 * DAY, dns_names=["broker"])
    (tmp_path / "server.pem").write_text(server.key_pem + server.cert_pem)
    (tmp_path / "old-ca.pem").write_text(old.cert_pem)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "server.pem")
    client_ctx = ssl.create_default_context(cafile=str(tmp_path / "old-ca.pem"))
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_ctx.wrap_bio(client_in, client_out, server_hostname="broker")
    srv = server_ctx.wrap_bio(server_in, server_out, server_side=True)
    done = set()
    for _ in range(10):
        for name, side, out_bio, peer_in in (("client", client, client_out, server_in),
                                             ("server", srv, server_out, client_in)):
            if name not in done:
                try:
                    side.do_handshake()
                    done.add(name)
                except ssl.SSLWantReadError:
                    pass
            peer_in.write(out_bio.read())
    assert done == {"client", "server"}


def test_when_a_leaf_certificate_is_issued_again():
    ca = pki.new_ca("CN=ca", 30 * DAY)
    names = ["a", "b"]
    leaf = pki.issue(ca, "CN=x", 10 * DAY, dns_names=names)
    assert certificates.needs_issue("", ca, DAY, names) == "missing"
    assert certificates.needs_issue(leaf.cert_pem, ca, DAY, names) is None
    assert certificates.needs_issue(leaf.cert_pem, ca, DAY, ["a"]) == "names changed"
    assert certificates.needs_issue(leaf.cert_pem, ca, 20 * DAY, names) == "expiring"
    other = pki.new_ca("CN=ca", 30 * DAY)  # same subject, another key
    assert certificates.needs_issue(leaf.cert_pem, other, DAY, names) == "signed by another CA key"
    assert certificates.needs_issue(leaf.cert_pem, certificates.renew_ca(ca, 30 * DAY), DAY, names) is None
    assert certificates.duration("15m") == datetime.timedelta(minutes=15)
    with pytest.raises(ValueError):
        certificates.duration("1y")


def test_a_users_acls_and_the_changes_that_make_them_so():
    user = UserSpec.model_validate({"cluster": "demo", "authentication": {"type": "scram-sha-512"},
                                    "authorization": {"acls": [
                                        {"resource": {"type": "topic", "name": "orders"},
                                         "operations": ["Read", "Describe"]},
                                        {"resource": {"type": "group", "name": "app-", "patternType": "prefix"},
                                         "operations": ["Read"]},
                                        {"resource": {"type": "cluster"}, "operations": ["IdempotentWrite"],
                                         "type": "deny"}]}})
    wanted = bindings("alice", user)
    assert principal("alice", user) == "User:alice"
    assert [(a.resource_type, a.resource_name, a.pattern_type, a.operation, a.permission) for a in wanted] == [
        (ResourceType.TOPIC, "orders", PatternType.LITERAL, Operation.READ, Permission.ALLOW),
        (ResourceType.TOPIC, "orders", PatternType.LITERAL, Operation.DESCRIBE, Permission.ALLOW),
        (ResourceType.GROUP, "app-", PatternType.PREFIXED, Operation.READ, Permission.ALLOW),
        (ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, Operation.IDEMPOTENT_WRITE, Permission.DENY)]
    someone_else = wanted[0].model_copy(update={"principal": "User:bob"})
    stale = wanted[0].model_copy(update={"operation": Operation.WRITE})
    create, delete = diff([wanted[1], stale, someone_else], wanted, "User:alice")
    assert create == [wanted[0], wanted[2], wanted[3]] and delete == [stale]
    tls_user = UserSpec.model_validate({"cluster": "demo", "authentication": {"type": "tls"}})
    assert principal("bob", tls_user) == "User:CN=bob" and bindings("bob", tls_user) == []


def test_the_secured_example_is_valid_and_says_what_the_docs_say():
    import yaml

    example = Path(__file__).resolve().parents[2] / "examples" / "kubernetes" / "secured.yaml"
    docs = {d["metadata"]["name"]: d for d in yaml.safe_load_all(example.read_text())}
    cluster = DMClusterSpec.model_validate(docs["demo"]["spec"])
    props = listeners.properties(cluster, "demo")
    assert props["listener.security.protocol.map"].count("SASL_SSL") == 1 and "MTLS:SSL" in props[
        "listener.security.protocol.map"]
    assert "User:CN=ops" in props["super.users"]
    app = UserSpec.model_validate(docs["orders-app"]["spec"])
    assert principal("orders-app", app) == "User:orders-app"
    assert {(b.resource_type, b.pattern_type) for b in bindings("orders-app", app)} == {
        (ResourceType.TOPIC, PatternType.PREFIXED), (ResourceType.GROUP, PatternType.LITERAL),
        (ResourceType.TRANSACTIONAL_ID, PatternType.PREFIXED)}
    assert principal("audit", UserSpec.model_validate(docs["audit"]["spec"])) == "User:CN=audit"


async def test_the_controller_api_over_tls_answers_each_cluster_with_its_own_ca(tmp_path: Path, monkeypatch):
    """The operator's TLS port (controller_tls.py) with a real controller behind it, and the broker's own
    controller client configured as the operator configures secured brokers: each cluster's brokers get
    a certificate their cluster CA signed for their cluster's name; another cluster's CA, another name,
    or no name at all is refused in the handshake."""
    from aiohttp import web
    from dm_broker.config import BrokerConfig
    from dm_broker.controller.client import ControllerUnavailable, HttpControllerClient
    from dm_broker.controller.controller import Controller
    from dm_broker.controller.http import add_controller_routes
    from dm_broker.controller.store import FileControllerStore
    from dm_broker.security.tls import TlsSettings, client_context
    from dm_operator.controller_tls import ControllerTls, server_name
    from harness import free_port

    controller = await Controller.open(FileControllerStore(tmp_path / "store"), expected_brokers=1)
    cas = {c: pki.new_ca(f"CN={c}-cluster-ca", 30 * DAY) for c in ("a", "b")}
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where keys pass through on their way into OpenSSL
    tls = ControllerTls()
    for cluster, ca in cas.items():
        assert tls.install("ns", cluster, ca) and not tls.install("ns", cluster, ca)  # issued once
        (tmp_path / f"{cluster}-ca.crt").write_text(ca.cert_pem)
    assert not list(scratch.iterdir()), "a private key stayed on disk"
    app = web.Application()
    add_controller_routes(app, "/clusters/{ns}/{cluster}", lambda _: controller, lambda _: "t0ken")
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=tls.context).start()

    def broker_client(cluster: str, trusted: str, name: str) -> HttpControllerClient:
        config = BrokerConfig.build({
            "controller.url": f"https://127.0.0.1:{port}/clusters/ns/{cluster}",
            "listener.name.controller.ssl.truststore.location": str(tmp_path / f"{trusted}-ca.crt"),
            "listener.name.controller.ssl.truststore.type": "PEM", "controller.tls.server.name": name}, environ={})
        context = client_context(TlsSettings.for_listener(config, "CONTROLLER"))
        return HttpControllerClient(config["controller.url"], "t0ken", 5, context,
                                    config["controller.tls.server.name"])

    try:
        for cluster in ("a", "b"):
            client = broker_client(cluster, cluster, server_name("ns", cluster))
            assert (await client.cluster_info()).incarnation  # the controller answered, over TLS
            await client.close()
        for cluster, trusted, name in (("a", "b", server_name("ns", "a")),  # another cluster's CA
                                       ("a", "a", server_name("ns", "b")),  # another cluster's name
                                       ("a", "a", "controller.nobody.ns.dm")):  # a name nobody serves
            client = broker_client(cluster, trusted, name)
            with pytest.raises(ControllerUnavailable):
                await client.cluster_info()
            await client.close()
        no_name = ssl.create_default_context(cadata=cas["a"].cert_pem)
        no_name.check_hostname = False
        with pytest.raises((ssl.SSLError, ConnectionResetError)):  # no SNI at all: the handshake is refused
            await asyncio.open_connection("127.0.0.1", port, ssl=no_name, server_hostname=None)
        # a renewed CA: the next pass issues again
        renewed = pki.new_ca("CN=a-cluster-ca", 30 * DAY, key_pem=cas["a"].key_pem)
        assert tls.install("ns", "a", renewed)
        tls.remove("ns", "b")
        assert not (tmp_path / "tls" / f"{server_name('ns', 'b')}.pem").exists()
    finally:
        await runner.cleanup()
        await controller.close()
