"""TLS listeners: every client over SSL and mutual TLS beside a PLAINTEXT listener; the refusals
(no client certificate, an untrusted or expired one, plaintext spoken to a TLS port); certificates
rotated on disk picked up by new connections without a restart; kcat over SSL."""

from __future__ import annotations

import datetime
import shutil
import socket
import ssl
import time
import warnings
from pathlib import Path

import pytest
from clients import ConfluentClient
from secure import DAY, Pki, secure_broker
from secure_clients import ROUND_TRIPS, Credentials, confluent_round_trip, kcat, refused

pytestmark = pytest.mark.timeout(180)
VALUES = [b"secret-%d" % i for i in range(10)]


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("tls")
    ca = Pki(base / "pki")
    server = ca.server()
    broker, ports = secure_broker(base / "data", {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL", "MTLS": "SSL"}, {
        "ssl.keystore.location": server,
        "ssl.truststore.location": ca.ca_file,
        "listener.name.mtls.ssl.client.auth": "required",
    })
    broker.start()
    yield broker, ports, ca
    broker.stop()


def server_certificate_serial(port: int, ca: Path) -> int:
    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        from cryptography import x509

        return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number


@pytest.mark.parametrize("client", list(ROUND_TRIPS))
def test_every_client_over_ssl_and_mutual_tls(tls_broker, topic_name, client):
    broker, ports, ca = tls_broker
    ConfluentClient(broker.bootstrap).create_topic(topic_name, 2)
    ssl_only = Credentials("SSL", ca=ca.ca_file)
    assert sorted(ROUND_TRIPS[client](f"127.0.0.1:{ports['SSL']}", ssl_only, topic_name, VALUES)) == VALUES
    cert, key = ca.client(f"CN={client}-app,O=dm")
    mutual = Credentials("SSL", ca=ca.ca_file, cert=cert, key=key)
    got = ROUND_TRIPS[client](f"127.0.0.1:{ports['MTLS']}", mutual, topic_name + "-m", VALUES)
    assert sorted(got) == VALUES


def test_metadata_on_a_tls_listener_names_that_listener(tls_broker, topic_name):
    """A client of the SSL listener must be sent to SSL ports only (else it would speak TLS to a
    plaintext port); each listener's clients see their own."""
    from confluent_kafka.admin import AdminClient

    broker, ports, ca = tls_broker
    md = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports['SSL']}",
                      **Credentials("SSL", ca=ca.ca_file).librdkafka()}).list_topics(timeout=10)
    assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", ports["SSL"])]
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", ports["PLAINTEXT"])]


def test_refusals(tls_broker, topic_name):
    broker, ports, ca = tls_broker
    mtls = f"127.0.0.1:{ports['MTLS']}"
    refused(mtls, Credentials("SSL", ca=ca.ca_file))  # no client certificate where one is required
    other = Pki(ca.directory / "other")
    cert, key = other.client("CN=intruder")
    refused(mtls, Credentials("SSL", ca=ca.ca_file, cert=cert, key=key))  # signed by a CA the broker does not trust
    past = datetime.datetime.now(datetime.UTC) - 3 * DAY
    cert, key = ca.client("CN=expired", validity=DAY, not_before=past)
    refused(mtls, Credentials("SSL", ca=ca.ca_file, cert=cert, key=key))  # expired
    refused(f"127.0.0.1:{ports['SSL']}", Credentials("SSL", ca=other.ca_file))  # the client does not trust the broker
    refused(f"127.0.0.1:{ports['SSL']}", Credentials())  # plaintext Kafka spoken to a TLS port
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # TLS 1.1
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    with socket.create_connection(("127.0.0.1", ports["SSL"]), timeout=5) as raw, pytest.raises(ssl.SSLError):
        ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    metrics = broker.http_get("/metrics")[1]
    failures = metric(metrics, 'dm_authentications_total{listener="MTLS",mechanism="SSL",result="failure"}')
    assert failures >= 3
    assert broker.alive()
    assert sorted(confluent_round_trip(broker.bootstrap, Credentials(), topic_name, VALUES)) == VALUES


def metric(text: str, series: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(series))


def test_a_rotated_certificate_is_used_without_a_restart(tmp_path: Path, topic_name):
    ca = Pki(tmp_path / "pki")
    live = ca.directory / "live.pem"
    shutil.copy(ca.server("first"), live)
    broker, ports = secure_broker(tmp_path / "data", {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"},
                                  {"ssl.keystore.location": live})
    with broker:
        before = server_certificate_serial(ports["SSL"], ca.ca_file)
        rotated = ca.server("second")
        tmp = live.with_suffix(".tmp")
        shutil.copy(rotated, tmp)
        tmp.replace(live)  # as a Secret volume update does: the new file appears at once
        deadline = time.monotonic() + 10
        after = before
        while after == before and time.monotonic() < deadline:
            time.sleep(0.5)
            after = server_certificate_serial(ports["SSL"], ca.ca_file)
        assert after != before, "the broker still presents the old certificate"
        creds = Credentials("SSL", ca=ca.ca_file)
        assert sorted(confluent_round_trip(f"127.0.0.1:{ports['SSL']}", creds, topic_name, VALUES)) == VALUES
        # a broken file (half written) keeps the last good certificate
        live.write_text("-----BEGIN CERTIFICATE-----\nnot really\n")
        time.sleep(1.5)
        assert server_certificate_serial(ports["SSL"], ca.ca_file) == after
        assert "still using the previous ones" in broker.log_tail(200)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (scripts/install-tools.sh installs it)")
def test_kcat_over_ssl_and_mutual_tls(tls_broker, topic_name):
    broker, ports, ca = tls_broker
    ConfluentClient(broker.bootstrap).create_topic(topic_name, 1)
    creds = Credentials("SSL", ca=ca.ca_file)
    put = kcat(f"127.0.0.1:{ports['SSL']}", creds, "-P", "-t", topic_name, stdin="one\ntwo\n")
    assert put.returncode == 0, put.stderr
    cert, key = ca.client("CN=kcat,O=dm")
    mutual = Credentials("SSL", ca=ca.ca_file, cert=cert, key=key)
    got = kcat(f"127.0.0.1:{ports['MTLS']}", mutual, "-C", "-t", topic_name, "-o", "beginning", "-c", "2", "-e")
    assert got.returncode == 0 and got.stdout.split() == ["one", "two"], got.stderr
    refused = kcat(f"127.0.0.1:{ports['MTLS']}", creds, "-L", "-m", "5")
    assert refused.returncode != 0
