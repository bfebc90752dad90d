"""SASL listeners: PLAIN (JAAS users) and SCRAM-SHA-256/512 (credentials made with
AlterUserScramCredentials, KIP-554) for the three clients over SASL_PLAINTEXT and SASL_SSL; the
refusals (wrong password, unknown user, a mechanism the listener does not offer, requests before
authentication); re-authentication (KIP-368); credentials described and deleted."""

from __future__ import annotations

import asyncio
import time

import pytest
from clients import ConfluentClient
from dm_broker.protocol.build import make
from dm_broker.protocol.client import KafkaConnection
from dm_broker.protocol.codec import request_class
from kio.schema.errors import ErrorCode
from secure import Pki, add_scram_users, secure_broker
from secure_clients import ROUND_TRIPS, Credentials, confluent_round_trip, refused

pytestmark = pytest.mark.timeout(240)
VALUES = [b"v-%d" % i for i in range(5)]
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-secret" '
              'user_alice="alice-secret";')


CONTROLLER_TOKEN = "the-controller-token-must-not-leak"


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("sasl")
    ca = Pki(base / "pki")
    broker, ports = secure_broker(base / "data", {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT",
                                                  "SASL_SSL": "SASL_SSL", "PLAINONLY": "SASL_PLAINTEXT",
                                                  "REAUTH": "SASL_PLAINTEXT"}, {
        "ssl.keystore.location": ca.server(),
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.plainonly.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.plainonly.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.reauth.connections.max.reauth.ms": 1500,
        "listener.name.reauth.plain.sasl.jaas.config": PLAIN_JAAS,
        "connection.failed.authentication.delay.ms": 50,
        "controller.token": CONTROLLER_TOKEN,
    })
    broker.start()
    add_scram_users(broker.bootstrap, {"bob": "bob-pw", "carol": "carol-pw"})
    yield broker, ports, ca
    broker.stop()


def creds(protocol: str, mechanism: str, ca: Pki, user: str, password: str) -> Credentials:
    return Credentials(protocol, ca=ca.ca_file if protocol == "SASL_SSL" else None, mechanism=mechanism,
                       username=user, password=password)


@pytest.mark.parametrize("client", list(ROUND_TRIPS))
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_every_client_and_mechanism_over_sasl_ssl(sasl_broker, topic_name, client, mechanism):
    broker, ports, ca = sasl_broker
    ConfluentClient(broker.bootstrap).create_topic(topic_name, 1)
    user, password = ("alice", "alice-secret") if mechanism == "PLAIN" else ("bob", "bob-pw")
    c = creds("SASL_SSL", mechanism, ca, user, password)
    assert sorted(ROUND_TRIPS[client](f"127.0.0.1:{ports['SASL_SSL']}", c, topic_name, VALUES)) == VALUES


@pytest.mark.parametrize("client", list(ROUND_TRIPS))
def test_every_client_over_sasl_plaintext(sasl_broker, topic_name, client):
    broker, ports, ca = sasl_broker
    ConfluentClient(broker.bootstrap).create_topic(topic_name, 1)
    c = creds("SASL_PLAINTEXT", "SCRAM-SHA-512", ca, "carol", "carol-pw")
    assert sorted(ROUND_TRIPS[client](f"127.0.0.1:{ports['SASL_PLAINTEXT']}", c, topic_name, VALUES)) == VALUES


def test_plain_also_accepts_scram_users(sasl_broker, topic_name):
    """PLAIN checks the listener's JAAS users first, then the SCRAM credentials (so one set of users
    serves both mechanisms)."""
    _broker, ports, ca = sasl_broker
    c = creds("SASL_PLAINTEXT", "PLAIN", ca, "bob", "bob-pw")
    assert sorted(confluent_round_trip(f"127.0.0.1:{ports['SASL_PLAINTEXT']}", c, topic_name, VALUES)) == VALUES


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_and_unknown_user_are_refused(sasl_broker, mechanism):
    broker, ports, ca = sasl_broker
    user = "alice" if mechanism == "PLAIN" else "bob"
    bootstrap = f"127.0.0.1:{ports['SASL_PLAINTEXT']}"
    for who, password in ((user, "wrong"), ("mallory", "whatever")):
        error = refused(bootstrap, creds("SASL_PLAINTEXT", mechanism, ca, who, password))
        assert "Authentication failed" in error or "authentication" in error.lower(), error
    metrics = broker.http_get("/metrics")[1]
    assert f'dm_authentications_total{{listener="SASL_PLAINTEXT",mechanism="{mechanism}",result="failure"}}' in metrics


def test_a_mechanism_the_listener_does_not_offer(sasl_broker):
    _broker, ports, ca = sasl_broker
    error = refused(f"127.0.0.1:{ports['PLAINONLY']}", creds("SASL_PLAINTEXT", "SCRAM-SHA-256", ca, "bob", "bob-pw"))
    assert "PLAIN" in error or "mechanism" in error.lower(), error
    ok = creds("SASL_PLAINTEXT", "PLAIN", ca, "admin", "admin-secret")
    assert confluent_round_trip(f"127.0.0.1:{ports['PLAINONLY']}", ok, "plainonly", [b"x"]) == [b"x"]


async def test_requests_before_authentication_close_the_connection(sasl_broker):
    broker, ports, _ = sasl_broker
    conn = await KafkaConnection.open("127.0.0.1", ports["SASL_PLAINTEXT"])
    versions = await conn.request(make(request_class(18, 3), client_software_name="t", client_software_version="1"))
    assert versions.error_code == ErrorCode.none  # ApiVersions is answered before authentication
    handshake = await conn.request(make(request_class(17, 1), mechanism="GSSAPI"))
    assert handshake.error_code == ErrorCode.unsupported_sasl_mechanism
    assert set(handshake.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
    await conn.close()
    conn = await KafkaConnection.open("127.0.0.1", ports["SASL_PLAINTEXT"])
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError, OSError)):
        await conn.request(make(request_class(3, 12), topics=None, allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False))
    await conn.close()
    # SaslAuthenticate with no handshake first
    conn = await KafkaConnection.open("127.0.0.1", ports["SASL_PLAINTEXT"])
    resp = await conn.request(make(request_class(36, 2), auth_bytes=b"\0alice\0alice-secret"))
    assert resp.error_code == ErrorCode.illegal_sasl_state
    await conn.close()
    # the PLAINTEXT listener has no SASL
    conn = await KafkaConnection.open("127.0.0.1", ports["PLAINTEXT"])
    resp = await conn.request(make(request_class(17, 1), mechanism="PLAIN"))
    assert resp.error_code == ErrorCode.illegal_sasl_state
    await conn.close()
    assert broker.alive()


async def test_sasl_handshake_v0_with_raw_tokens(sasl_broker):
    """SaslHandshake v0: the tokens that follow are bare frames (the oldest clients)."""
    import struct

    _broker, ports, _ = sasl_broker
    conn = await KafkaConnection.open("127.0.0.1", ports["SASL_PLAINTEXT"])
    resp = await conn.request(make(request_class(17, 0), mechanism="PLAIN"))
    assert resp.error_code == ErrorCode.none
    token = b"\0alice\0alice-secret"
    await conn.send_raw(struct.pack(">i", len(token)) + token)
    assert bytes(await conn.read_frame()) == b""  # PLAIN's empty server answer: authenticated
    md = await conn.request(make(request_class(3, 12), topics=None, allow_auto_topic_creation=False,
                                 include_topic_authorized_operations=False))
    assert md.brokers[0].port == ports["SASL_PLAINTEXT"]
    await conn.close()


async def _authenticate_plain(conn: KafkaConnection, user: str, password: str) -> object:
    resp = await conn.request(make(request_class(17, 1), mechanism="PLAIN"))
    assert resp.error_code == ErrorCode.none
    return await conn.request(make(request_class(36, 2), auth_bytes=f"\0{user}\0{password}".encode()))


async def test_sessions_expire_without_reauthentication_and_renew_with_it(sasl_broker):
    """connections.max.reauth.ms=1500 on REAUTH: the answer tells the session lifetime; a client
    that re-authenticates (as the same principal) goes on, one that does not is disconnected, and one
    that re-authenticates as someone else is refused."""
    _broker, ports, _ = sasl_broker
    conn = await KafkaConnection.open("127.0.0.1", ports["REAUTH"])
    resp = await _authenticate_plain(conn, "alice", "alice-secret")
    assert resp.error_code == ErrorCode.none and resp.session_lifetime.total_seconds() == 1.5
    await asyncio.sleep(1.0)
    again = await _authenticate_plain(conn, "alice", "alice-secret")  # in band, before expiry
    assert again.error_code == ErrorCode.none
    await asyncio.sleep(1.0)  # 2 s after the first authentication, 1 s after the second: still valid
    versions = make(request_class(3, 12), topics=None, allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False)
    assert (await conn.request(versions)).brokers
    await asyncio.sleep(1.0)
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError, OSError)):
        await conn.request(versions)
    await conn.close()
    conn = await KafkaConnection.open("127.0.0.1", ports["REAUTH"])
    await _authenticate_plain(conn, "alice", "alice-secret")
    other = await _authenticate_plain(conn, "admin", "admin-secret")
    assert other.error_code == ErrorCode.sasl_authentication_failed
    await conn.close()


def test_librdkafka_reauthenticates_on_a_long_lived_connection(sasl_broker, topic_name):
    from confluent_kafka import Producer

    broker, ports, ca = sasl_broker
    c = creds("SASL_PLAINTEXT", "SCRAM-SHA-256", ca, "bob", "bob-pw")
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{ports['REAUTH']}", **c.librdkafka(), "acks": "all"})
    errors: list[object] = []
    deadline = time.monotonic() + 5  # more than three session lifetimes
    sent = 0
    while time.monotonic() < deadline:
        producer.produce(topic_name, b"r%d" % sent, on_delivery=lambda err, _m: errors.append(err) if err else None)
        producer.poll(0.05)
        sent += 1
    assert producer.flush(20) == 0 and not errors, errors[:3]
    got = ConfluentClient(broker.bootstrap).consume(topic_name, sent, timeout=20)
    assert len(got) == sent
    # it re-authenticated on its connection(s) instead of being disconnected every 1.5 s
    metrics = broker.http_get("/metrics")[1]
    series = 'dm_authentications_total{listener="REAUTH",mechanism="SCRAM-SHA-256",result="success"}'
    successes = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if line.startswith(series))
    assert successes >= 3, metrics


def test_credentials_are_described_and_deleted(sasl_broker, topic_name):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    broker, ports, ca = sasl_broker
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_user_scram_credentials().result(15)
    assert {"bob", "carol"} <= set(described)
    assert sorted((i.mechanism, i.iterations) for i in described["bob"].scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 4096)]
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"dave-pw")])["dave"].result(15)
    c = creds("SASL_PLAINTEXT", "SCRAM-SHA-512", ca, "dave", "dave-pw")
    assert confluent_round_trip(f"127.0.0.1:{ports['SASL_PLAINTEXT']}", c, topic_name, [b"d"]) == [b"d"]
    admin.alter_user_scram_credentials([UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_512)])[
        "dave"].result(15)
    refused(f"127.0.0.1:{ports['SASL_PLAINTEXT']}", c)
    # Kafka's refusals: too few iterations, deleting what does not exist
    with pytest.raises(KafkaException, match="iterations"):
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 10), b"pw")])["erin"].result(15)
    with pytest.raises(KafkaException, match=r"does not exist|no SCRAM-SHA-256"):
        admin.alter_user_scram_credentials([UserScramCredentialDeletion("nobody", ScramMechanism.SCRAM_SHA_256)])[
            "nobody"].result(15)
    with pytest.raises(KafkaException, match="does not exist"):
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(15)


def test_describe_configs_shows_listeners_and_hides_secrets(sasl_broker):
    from confluent_kafka.admin import AdminClient, ConfigResource

    broker, ports, _ = sasl_broker
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource("broker", "0")
    configs = admin.describe_configs([resource])[resource].result(15)
    assert configs["sasl.jaas.config"].is_sensitive and configs["sasl.jaas.config"].value is None
    assert configs["ssl.keystore.password"].is_sensitive
    # the controller token opens the controller API: never readable (issue 30), nor logged or exported
    assert configs["controller.token"].is_sensitive and configs["controller.token"].value is None
    assert CONTROLLER_TOKEN not in broker.log_tail(100000)
    assert CONTROLLER_TOKEN not in broker.http_get("/metrics")[1]
    assert f"SASL_SSL://127.0.0.1:{ports['SASL_SSL']}" in configs["advertised.listeners"].value
    assert f"REAUTH://127.0.0.1:{ports['REAUTH']}" in configs["listeners"].value
