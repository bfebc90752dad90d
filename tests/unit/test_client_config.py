"""Client security settings in the Java client's names (Spark's Kafka source, Kafka's client.properties)
turned into librdkafka's, and the TLS context and SASL credentials dm's own client builds from them.
Real certificates and files; the handshakes themselves are in tests/integration/test_client_security.py."""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, load_pem_private_key, pkcs12
from dm_broker.config import ConfigError
from dm_broker.security import pki
from dm_broker.security.client_config import check, security_only, to_librdkafka, wire_security
from dm_broker.security.sasl_client import client_exchange

DAY = datetime.timedelta(days=1)
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="bob" password="p\\"w";'


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    d = tmp_path_factory.mktemp("pki")
    ca = pki.new_ca("CN=test-ca", DAY)
    client = pki.issue(ca, "CN=app", DAY, server=False)
    (d / "ca.pem").write_text(ca.cert_pem)
    (d / "client.pem").write_text(client.key_pem + client.cert_pem)  # Kafka's PEM keystore: key and chain
    (d / "client.crt").write_text(client.cert_pem)
    (d / "client.key").write_text(client.key_pem)
    key = load_pem_private_key(client.key_pem.encode(), None)
    cert = x509.load_pem_x509_certificate(client.cert_pem.encode())
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.encode())
    (d / "client.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        b"app", key, cert, [ca_cert], BestAvailableEncryption(b"store-pw")))  # type: ignore[arg-type]
    (d / "trust.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        b"ca", None, ca_cert, None, BestAvailableEncryption(b"trust-pw")))
    return {"dir": d, "ca": ca, "client": client}


def test_jaas_becomes_username_and_password_and_java_only_names_are_gone():
    out = to_librdkafka({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                         "sasl.jaas.config": SCRAM_JAAS, "linger.ms": "5"})
    assert out == {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bob",
                   "sasl.password": 'p"w', "linger.ms": "5"}
    security = wire_security(out)
    assert security is not None and security.ssl_context is None
    assert (security.mechanism, security.username, security.password) == ("SCRAM-SHA-512", "bob", 'p"w')


def test_librdkafka_names_pass_through_and_win_over_the_java_ones():
    given = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN", "sasl.username": "alice",
             "sasl.password": "a", "sasl.jaas.config": SCRAM_JAAS}
    out = to_librdkafka(given)
    assert (out["sasl.username"], out["sasl.password"]) == ("alice", "a")
    assert wire_security(out).mechanism == "PLAIN"  # type: ignore[union-attr]


def test_pem_truststore_and_keystore_files(material):
    d: Path = material["dir"]  # type: ignore[assignment]
    out = to_librdkafka({"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                         "ssl.truststore.location": str(d / "ca.pem"), "ssl.keystore.type": "PEM",
                         "ssl.keystore.location": str(d / "client.pem")})
    assert out == {"security.protocol": "SSL", "ssl.ca.location": str(d / "ca.pem"),
                   "ssl.certificate.location": str(d / "client.pem"), "ssl.key.location": str(d / "client.pem")}
    context = wire_security(out).ssl_context  # type: ignore[union-attr]
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "test-ca"),),)]


def test_inline_pem_and_the_endpoint_check_turned_off(material):
    ca, client = material["ca"], material["client"]
    out = to_librdkafka({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                         "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                             'username="u" password="p";',
                         "ssl.truststore.certificates": ca.cert_pem,  # type: ignore[attr-defined]
                         "ssl.keystore.certificate.chain": client.cert_pem,  # type: ignore[attr-defined]
                         "ssl.keystore.key": client.key_pem,  # type: ignore[attr-defined]
                         "ssl.endpoint.identification.algorithm": ""})
    assert out["ssl.ca.pem"] == ca.cert_pem and out["ssl.certificate.pem"] == client.cert_pem  # type: ignore[attr-defined]
    assert out["ssl.key.pem"] == client.key_pem and out["ssl.endpoint.identification.algorithm"] == "none"  # type: ignore[attr-defined]
    security = wire_security(out)
    assert security is not None and not security.ssl_context.check_hostname  # type: ignore[union-attr]
    assert security.sasl and security.username == "u"


def test_pkcs12_stores(material):
    d: Path = material["dir"]  # type: ignore[assignment]
    out = to_librdkafka({"security.protocol": "SSL", "ssl.truststore.type": "PKCS12",
                         "ssl.truststore.location": str(d / "trust.p12"), "ssl.truststore.password": "trust-pw",
                         "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(d / "client.p12"),
                         "ssl.keystore.password": "store-pw"})
    # librdkafka reads a PKCS12 keystore itself; the truststore it cannot, so its CAs come as PEM
    assert out["ssl.keystore.location"] == str(d / "client.p12") and out["ssl.keystore.password"] == "store-pw"
    assert out["ssl.ca.pem"].startswith("-----BEGIN CERTIFICATE-----")
    assert "ssl.truststore.location" not in out and "ssl.truststore.password" not in out
    assert wire_security(out).ssl_context is not None  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match=r"ssl\.truststore\.location: cannot read the PKCS12 store"):
        to_librdkafka({"security.protocol": "SSL", "ssl.truststore.type": "PKCS12",
                       "ssl.truststore.location": str(d / "trust.p12"),
                       "ssl.truststore.password": "wrong"})


@pytest.mark.parametrize(("props", "message"), [
    ({"security.protocol": "SSL", "ssl.truststore.type": "JKS", "ssl.truststore.location": "/x.jks"},
     "ssl.truststore.type: JKS is not supported"),
    ({"ssl.keystore.location": "/app.pem"}, "ssl.keystore.location is set but security.protocol is PLAINTEXT"),
    ({"sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;"},
     "Krb5LoginModule is not supported"),
    ({"sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"u\";"},
     "needs username"),
    ({"sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"u\""},
     "ends with ';'"),
])
def test_translation_refusals(props, message):
    with pytest.raises(ConfigError, match=message):
        to_librdkafka(props)


@pytest.mark.parametrize(("config", "message"), [
    ({"security.protocol": "SASL_SSL!"}, "is not one of PLAINTEXT, SSL"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "u", "sasl.password": "p"},
     "GSSAPI is not supported"),  # Kafka's default mechanism, named rather than guessed
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "OAUTHBEARER is not supported"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "needs credentials"),
    ({"ssl.ca.location": "/ca.pem"}, "ssl.ca.location is set but security.protocol is PLAINTEXT"),
])
def test_settings_no_connection_can_be_made_with(config, message):
    with pytest.raises(ConfigError, match=message):
        check(config)


def test_files_that_are_not_there_are_named(tmp_path):
    with pytest.raises(ConfigError, match=r"client TLS: .*missing\.pem does not exist"):
        wire_security({"security.protocol": "SSL", "ssl.ca.location": str(tmp_path / "missing.pem")})
    with pytest.raises(ConfigError, match=r"ssl\.key\.location: cannot read"):
        wire_security({"security.protocol": "SSL", "ssl.certificate.location": str(tmp_path / "c.pem"),
                       "ssl.key.location": str(tmp_path / "k.pem")})


def test_plaintext_needs_no_context_and_security_only_keeps_connection_settings():
    assert wire_security({}) is None and wire_security({"security.protocol": "plaintext"}) is None
    assert security_only({"security.protocol": "SSL", "ssl.ca.location": "c", "sasl.username": "u",
                          "linger.ms": "5", "isolation.level": "read_committed"}) == {
        "security.protocol": "SSL", "ssl.ca.location": "c", "sasl.username": "u"}


def test_scram_exchange_against_a_server_that_knows_the_credential():
    from scramp import ScramMechanism

    mechanism = ScramMechanism("SCRAM-SHA-256")
    salt, stored, server_key, iterations = mechanism.make_auth_info("pw", iteration_count=4096)
    server = mechanism.make_server(lambda _user: (salt, stored, server_key, iterations))
    exchange = client_exchange("SCRAM-SHA-256", "bob", "pw")
    server.set_client_first(next(exchange).decode())
    server.set_client_final(exchange.send(server.get_server_first().encode()).decode())
    with pytest.raises(StopIteration):
        exchange.send(server.get_server_final().encode())
    plain = client_exchange("PLAIN", "bob", "pw")
    assert next(plain) == b"\0bob\0pw"
    with pytest.raises(ValueError, match="GSSAPI"):
        next(client_exchange("GSSAPI", "bob", "pw"))
