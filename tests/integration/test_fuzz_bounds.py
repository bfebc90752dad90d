"""The fuzz lane of issue 65: frames of every API the broker serves, well formed then damaged (a length or count
claimed huge, the frame cut short, bytes flipped), and REST bodies drawn at random, sent to a live broker while
another client keeps asking it something. The broker answers each or closes its connection; its event loop is
never late by over 100 ms of its own doing (the loop watchdog, dm_event_loop_stalls_total); its memory stays
within a bound; and the other client is answered throughout. test_fuzz.py draws well-formed requests of every
API; this draws what a hostile or broken client sends, and checks the broker's bounds while it does."""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time

import pytest
import requests
from dm_broker.protocol.apis import SPECS
from dm_broker.protocol.client import encode_request
from dm_broker.protocol.codec import request_class
from floods import build
from harness import BrokerProcess, free_port
from hostile import Stalls, read_frame
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz_auth import rss_mb

pytestmark = pytest.mark.timeout(900)
EXAMPLES = int(os.environ.get("DM_FUZZ_EXAMPLES", "8"))  # draws per API (and per REST route)
RSS_BOUND_MB = 200
HUGE = [b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff\x07", b"\x00\x10\x00\x00", b"\x7f\xff"]  # int32, varint, 1 Mi, int16


class Pinger(threading.Thread):
    """A client asking ApiVersions every 20 ms; remembers any question left unanswered for 10 s."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.stop = threading.Event()
        self.failures: list[str] = []
        self.answered = 0

    def run(self) -> None:
        frame = struct.pack(">hhih", 18, 0, 99, 1) + b"x"
        while not self.stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=10) as sock:
                    while not self.stop.is_set():
                        sock.sendall(struct.pack(">i", len(frame)) + frame)
                        if read_frame(sock) is None:
                            raise ConnectionError("closed")
                        self.answered += 1
                        time.sleep(0.02)
            except OSError as exc:
                if not self.stop.is_set():
                    self.failures.append(repr(exc))


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory):
    from clients import ConfluentClient

    rest_port = free_port()
    with BrokerProcess(tmp_path_factory.mktemp("fuzz-bounds") / "data",
                       {"http.listeners": f"HTTP://127.0.0.1:{rest_port}"}) as broker:
        ConfluentClient(broker.bootstrap).create_topic("fuzz", 3)
        broker.rest = f"http://127.0.0.1:{rest_port}"
        pinger = Pinger(broker.port)
        pinger.start()
        stalls, rss = Stalls.of(broker), rss_mb(broker.proc.pid)
        yield broker
        pinger.stop.set()
        pinger.join(15)
        grown = rss_mb(broker.proc.pid) - rss
        print(f"fuzzed: {pinger.answered} pings answered meanwhile, stalls {stalls.since()}, RSS +{grown:.0f} MB")
        assert broker.alive(), broker.log_tail()
        assert pinger.failures == [], pinger.failures[:3]
        assert stalls.since() == {}, "the event loop stalled while fuzzed"
        assert grown < RSS_BOUND_MB, f"the broker grew {grown:.0f} MB"


def _send(port: int, frame: bytes) -> None:
    """Sends a frame; reads an answer or the close, whichever comes (a held answer is not waited for)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.settimeout(0.2)
        try:
            sock.sendall(frame)
            read_frame(sock)
        except OSError:
            pass


@st.composite
def damaged(draw, key: int) -> bytes:
    spec = next(s for s in SPECS if s.key == key)
    version = draw(st.integers(spec.min_version, spec.max_version))
    frame = bytearray(encode_request(key, version, 7, build(request_class(key, version), draw(st.integers(1, 3)))))
    how = draw(st.sampled_from(["huge", "huge", "cut", "flip", "grow"]))
    body = draw(st.integers(12, max(12, len(frame) - 1)))  # past the size prefix and the fixed header fields
    if how == "huge":
        claim = draw(st.sampled_from(HUGE))
        frame[body:body + len(claim)] = claim
    elif how == "cut":
        del frame[body:]
    elif how == "flip":
        frame[body] ^= 1 << draw(st.integers(0, 7))
    else:  # more bytes than the body needs: a trailing claim of nothing
        frame += draw(st.binary(min_size=1, max_size=64))
    struct.pack_into(">i", frame, 0, len(frame) - 4)
    return bytes(frame)


@pytest.mark.parametrize("api_key", sorted(s.key for s in SPECS))
def test_damaged_frames_of_every_api(fuzzed, api_key):
    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(frame=damaged(api_key))
    def draws(frame: bytes) -> None:
        _send(fuzzed.port, frame)
        assert fuzzed.alive()

    draws()


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner,
                                                                                 max_size=5), max_leaves=30)
RECORD = st.fixed_dictionaries({}, optional={"value": JSON, "key": JSON, "partition": st.integers(),
                                             "timestamp": st.integers(), "headers": JSON})
BODIES = st.one_of(JSON, st.fixed_dictionaries({"records": st.lists(RECORD, max_size=20)}),
                   st.integers(1, 20_000).map(lambda n: {"records": [{"value": "QQ=="}] * n}),  # many records
                   st.binary(max_size=200))
ROUTES = [("post", "/topics/fuzz", "application/vnd.kafka.binary.v2+json"),
          ("post", "/topics/fuzz", "application/vnd.kafka.json.v2+json"),
          ("post", "/topics/fuzz/partitions/0", "application/vnd.kafka.binary.v2+json"),
          ("post", "/consumers/fuzz-group", "application/vnd.kafka.v2+json")]


@pytest.mark.parametrize("method, path, content_type", ROUTES)
def test_random_rest_bodies(fuzzed, method, path, content_type):
    @settings(max_examples=EXAMPLES * 3, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(body=BODIES)
    def draws(body) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        answer = requests.request(method, fuzzed.rest + path, data=data, headers={"Content-Type": content_type},
                                  timeout=60)
        assert answer.status_code < 500 or answer.status_code == 503, (answer.status_code, answer.text[:300])

    draws()
