"""dm's own blocking client (the Spark connector's) over TLS, mutual TLS and SASL (PLAIN, SCRAM),
configured in the Java client's names as a Spark or Kafka user writes them; and its refusals, each
with the reason in the message. A real broker with one listener per protocol."""

from __future__ import annotations

import time

import pytest
from clients import ConfluentClient, Rec
from dm_broker.security.client_config import to_librdkafka
from pyspark_dm.errors import DmSourceError
from pyspark_dm.wire import EARLIEST, LATEST, DmClient
from secure import Pki, add_scram_users, secure_broker

pytestmark = pytest.mark.timeout(180)
PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-pw";'
VALUES = [b"r-%d" % i for i in range(20)]


def jaas(mechanism: str, user: str, password: str) -> str:
    module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
    return f'org.apache.kafka.common.security.{module} required username="{user}" password="{password}";'


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("client-security")
    ca = Pki(base / "pki")
    broker, ports = secure_broker(base / "data", {"PLAINTEXT": "PLAINTEXT", "SASL_SSL": "SASL_SSL",
                                                  "MTLS": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT",
                                                  "REAUTH": "SASL_PLAINTEXT"}, {
        "ssl.keystore.location": ca.server(),
        "ssl.truststore.location": ca.ca_file,
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "listener.name.reauth.connections.max.reauth.ms": 1000,
        "connection.failed.authentication.delay.ms": 50,
    })
    broker.start()
    add_scram_users(broker.bootstrap, {"bob": "bob-pw"})
    ConfluentClient(broker.bootstrap).create_topic("secured", 2)
    ConfluentClient(broker.bootstrap).produce("secured", [Rec(None, v) for v in VALUES])
    yield broker, ports, ca
    broker.stop()


def read_all(bootstrap: str, config: dict[str, str]) -> list[bytes]:
    """Every record of the topic through dm's client: metadata, offsets and fetches on the listener."""
    from dm_broker.log.records import decode_records, iter_batches

    got = []
    with DmClient(bootstrap, timeout=10, client_config=to_librdkafka(config)) as client:
        assert sorted(client.metadata(["secured"]).topics["secured"]) == [0, 1]
        for p in (0, 1):
            start = client.list_offsets({("secured", p): EARLIEST})[("secured", p)]
            end = client.list_offsets({("secured", p): LATEST})[("secured", p)]
            if end > start:
                res = client.fetch("secured", p, start, 1 << 20)
                for offset, header in iter_batches(res.records):
                    batch = bytes(memoryview(res.records)[offset: offset + header.size])
                    got += [r.value for r in decode_records(batch)]
    return sorted(got)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_ssl_with_the_java_clients_settings(secured, mechanism):
    _broker, ports, ca = secured
    user, password = ("alice", "alice-pw") if mechanism == "PLAIN" else ("bob", "bob-pw")
    config = {"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
              "sasl.jaas.config": jaas(mechanism, user, password), "ssl.truststore.type": "PEM",
              "ssl.truststore.location": str(ca.ca_file)}
    assert read_all(f"localhost:{ports['SASL_SSL']}", config) == sorted(VALUES)


def test_mutual_tls_with_a_pem_keystore(secured):
    _broker, ports, ca = secured
    cert, key = ca.client("CN=spark-app,O=dm")
    keystore = ca.write("spark-app.pem", key.read_text() + cert.read_text())
    config = {"security.protocol": "SSL", "ssl.truststore.location": str(ca.ca_file),
              "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)}
    assert read_all(f"127.0.0.1:{ports['MTLS']}", config) == sorted(VALUES)


def test_sasl_plaintext_with_librdkafkas_names(secured):
    _broker, ports, _ca = secured
    config = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "bob",
              "sasl.password": "bob-pw"}
    assert read_all(f"127.0.0.1:{ports['SASL_PLAINTEXT']}", config) == sorted(VALUES)


def test_a_session_that_expires_is_authenticated_again_on_a_new_connection(secured):
    """KIP-368: the broker closes a connection whose session outlived connections.max.reauth.ms; the
    blocking client does not re-authenticate in place, it reconnects and logs in again."""
    _broker, ports, _ca = secured
    config = to_librdkafka({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                            "sasl.jaas.config": jaas("SCRAM", "bob", "bob-pw")})
    with DmClient(f"127.0.0.1:{ports['REAUTH']}", timeout=10, client_config=config) as client:
        first = client.list_offsets({("secured", 0): LATEST})
        time.sleep(1.5)  # the session has expired: the next request on that connection is refused
        assert client.list_offsets({("secured", 0): LATEST}) == first
        assert client.fetch("secured", 0, 0, 1 << 20).high_watermark == first[("secured", 0)]


def test_refusals_say_why(secured, tmp_path):
    _broker, ports, ca = secured
    sasl_ssl = f"127.0.0.1:{ports['SASL_SSL']}"
    tls = {"security.protocol": "SASL_SSL", "ssl.truststore.location": str(ca.ca_file)}
    with pytest.raises(DmSourceError, match="SASL authentication as 'bob' failed"):
        read_all(sasl_ssl, {**tls, "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": jaas("SCRAM", "bob", "no")})
    with pytest.raises(DmSourceError, match=r"PLAIN is not enabled on this listener \(it offers SCRAM-SHA-256\)"):
        read_all(f"127.0.0.1:{ports['SASL_PLAINTEXT']}", {"security.protocol": "SASL_PLAINTEXT",
                                                          "sasl.mechanism": "PLAIN",
                                                          "sasl.jaas.config": jaas("PLAIN", "alice", "alice-pw")})
    other = Pki(tmp_path / "other")  # a CA the broker's certificate is not signed by
    with pytest.raises(DmSourceError, match="CERTIFICATE_VERIFY_FAILED"):
        read_all(sasl_ssl, {"security.protocol": "SASL_SSL", "ssl.truststore.location": str(other.ca_file),
                            "sasl.mechanism": "PLAIN", "sasl.jaas.config": jaas("PLAIN", "alice", "alice-pw")})
    # the mTLS listener, and no client certificate
    with pytest.raises(DmSourceError, match="without a certificate its truststore accepts"):
        read_all(f"127.0.0.1:{ports['MTLS']}", {"security.protocol": "SSL", "ssl.truststore.location": str(ca.ca_file)})
