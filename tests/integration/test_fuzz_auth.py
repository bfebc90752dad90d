"""The SASL and TLS handshakes under garbage: malformed and truncated SASL frames and SCRAM messages,
huge tokens, mutated TLS ClientHellos and random bytes on TLS ports. The broker answers with an
error or closes the connection, never crashes, keeps serving, and its memory stays bounded."""

from __future__ import annotations

import socket
import ssl
import struct
from pathlib import Path

import pytest
from dm_broker.protocol.build import make
from dm_broker.protocol.client import encode_request
from dm_broker.protocol.codec import request_class
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from secure import Pki, secure_broker
from secure_clients import Credentials, confluent_round_trip

pytestmark = pytest.mark.timeout(300)
JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_u="p";'
SUPPRESS = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@pytest.fixture(scope="module")
def auth_broker(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("fuzz-auth")
    ca = Pki(base / "pki")
    broker, ports = secure_broker(base / "data", {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT",
                                                  "SSL": "SSL"}, {
        "ssl.keystore.location": ca.server(),
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "connection.failed.authentication.delay.ms": 0,
    })
    broker.start()
    yield broker, ports, ca
    broker.stop()


def handshake(version: int, mechanism: str) -> bytes:
    return encode_request(17, version, 1, make(request_class(17, version), mechanism=mechanism))


def authenticate(token: bytes, version: int = 2) -> bytes:
    return encode_request(36, version, 2, make(request_class(36, version), auth_bytes=token))


def exchange(port: int, data: bytes, tls: ssl.SSLContext | None = None) -> None:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            raw.settimeout(3)
            s = tls.wrap_socket(raw, server_hostname="127.0.0.1") if tls else raw
            s.sendall(data)
            if tls is None:
                s.shutdown(socket.SHUT_WR)
            while s.recv(65536):
                pass
    except OSError:
        pass  # closing the connection is a valid answer to garbage


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@st.composite
def sasl_conversations(draw) -> bytes:
    mechanism = draw(st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "", "x" * 300]))
    version = draw(st.sampled_from([0, 1]))
    first = draw(st.sampled_from([
        b"n,,n=u,r=abc", b"n,,n=,r=", b"p=tls-unique,,n=u,r=x", b"n,a=other,n=u,r=x", b"n,,n=u", b"\0u\0p",
        b"\0u", b"", b"n,,n=u,r=" + b"A" * 5000, b"c=biws,r=x,p=AAAA"]))
    if draw(st.booleans()):
        first = draw(st.binary(max_size=200))
    second = draw(st.binary(max_size=100))
    frames = handshake(version, mechanism)
    if version == 0:  # then bare tokens
        frames += struct.pack(">i", len(first)) + first + struct.pack(">i", len(second)) + second
    else:
        frames += authenticate(first, draw(st.integers(0, 2))) + authenticate(second)
    if draw(st.booleans()):  # a truncated frame at the end
        frames = frames[: draw(st.integers(1, len(frames)))]
    return frames


@settings(max_examples=150, deadline=None, suppress_health_check=SUPPRESS)
@given(conversation=sasl_conversations())
def test_malformed_sasl_conversations(auth_broker, conversation):
    broker, ports, _ = auth_broker
    exchange(ports["SASL_PLAINTEXT"], conversation)
    assert broker.alive()


def client_hello() -> bytes:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="dm")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


HELLO = client_hello()


@st.composite
def mutated_hellos(draw) -> bytes:
    data = bytearray(HELLO)
    for _ in range(draw(st.integers(1, 6))):
        pos = draw(st.integers(0, len(data) - 1))
        op = draw(st.sampled_from(["flip", "cut", "insert"]))
        if op == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut":
            del data[pos: pos + draw(st.integers(1, 40))]
        else:
            data[pos:pos] = draw(st.binary(min_size=1, max_size=40))
        if not data:
            break
    return bytes(data)


@settings(max_examples=150, deadline=None, suppress_health_check=SUPPRESS)
@given(hello=mutated_hellos())
def test_mutated_tls_client_hellos(auth_broker, hello):
    broker, ports, _ = auth_broker
    exchange(ports["SSL"], hello)
    assert broker.alive()


@settings(max_examples=50, deadline=None, suppress_health_check=SUPPRESS)
@given(data=st.binary(min_size=1, max_size=3000))
def test_random_bytes_on_the_tls_port(auth_broker, data):
    broker, ports, _ = auth_broker
    exchange(ports["SSL"], data)
    assert broker.alive()


def test_huge_tokens_are_refused_and_memory_stays_bounded(auth_broker):
    """Tokens over sasl.server.max.receive.size (512 KiB) are refused; a frame over
    socket.request.max.bytes is never read; neither grows the broker."""
    broker, ports, _ = auth_broker
    before = rss_mb(broker.proc.pid)
    for _ in range(30):
        exchange(ports["SASL_PLAINTEXT"], handshake(1, "PLAIN") + authenticate(b"\0u\0" + b"p" * 600_000))
    for _ in range(30):  # declares 90 MiB, sends little: refused at the size prefix or left unread
        exchange(ports["SASL_PLAINTEXT"], struct.pack(">i", 90 << 20) + b"\0" * 1000)
    after = rss_mb(broker.proc.pid)
    assert after - before < 64, f"RSS grew from {before:.0f} to {after:.0f} MB"
    assert broker.alive()


def test_everything_still_works_after_the_fuzzing(auth_broker, topic_name):
    broker, ports, ca = auth_broker
    plain = Credentials("SASL_PLAINTEXT", mechanism="PLAIN", username="u", password="p")
    assert confluent_round_trip(f"127.0.0.1:{ports['SASL_PLAINTEXT']}", plain, topic_name, [b"ok"]) == [b"ok"]
    assert confluent_round_trip(f"127.0.0.1:{ports['SSL']}", Credentials("SSL", ca=ca.ca_file), topic_name + "-t",
                                [b"ok"]) == [b"ok"]
    log = broker.log_tail(100000)
    assert "unexpected error" not in log and "Traceback" not in log, "a handler raised instead of answering"
