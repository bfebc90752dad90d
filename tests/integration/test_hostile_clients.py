"""No one logged-in user can stall the broker (issue 65). alice and bob log in over SASL and hold no ACLs but
their own group's; each test sends what stalled the broker until it was fenced before, and asserts with the
broker's loop watchdog (dm_event_loop_stalls_total) that its event loop was never late by over 100 ms of its own
doing, and that it keeps serving.

Measured on main before the fix (issue 65): 262,144 partition indexes in a 1 MiB DescribeProducers stalled the loop
2.1 s; 4 MiB of them 6.4 s and 4 MiB of 3-byte topic names 16.8 s (the broker fenced); the regex `(.|.)*X0`
in a ConsumerGroupHeartbeat 17.2 s against a 25-character topic name; a REST produce of 838,855 records 22.9 s."""

from __future__ import annotations

import base64
import datetime
import json
import struct
import time
import uuid

import pytest
import requests
from clients import ConfluentClient
from dm_broker.protocol.apis import SPECS
from dm_broker.protocol.build import make, nested
from dm_broker.protocol.client import decode_response, encode_request
from dm_broker.protocol.codec import request_class
from floods import flood
from harness import free_port
from hostile import Stalls, exchange, logged_in, read_frame
from secure import secure_broker
from test_fuzz_auth import rss_mb

pytestmark = pytest.mark.timeout(600)
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-pw" '
        'user_bob="bob-pw" user_admin="admin-pw";')
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ELEMENTS = 50_000  # socket.request.max.elements, dm's default
LONG_NAME = "t" * 25
# How long a flood's answer is waited for: an acks=0 produce has none, a join waits for its rebalance. A stall
# shows in the loop watchdog's count whether or not the answer was waited for.
ANSWER_WAIT_S = 5  # the 25-character topic name the regex was matched against


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory):
    rest_port = free_port()
    broker, ports = secure_broker(tmp_path_factory.mktemp("hostile") / "data",
                                  {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT"}, {
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "http.listeners": f"HTTP://127.0.0.1:{rest_port}",
        "http.authentication.method": "BASIC",
        "listener.name.http.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": AUTHORIZER,
        # the PLAINTEXT listener (the inter-broker one and the tests' admin), and admin for /metrics
        "super.users": "User:ANONYMOUS;User:admin",
        "group.share.max.size": 20,  # members of one share group, and so its share sessions on a broker
    })
    broker.http_auth = ("admin", "admin-pw")
    broker.start()
    admin = ConfluentClient(broker.bootstrap)
    for topic in ("secrets", LONG_NAME, "alice-topic"):
        admin.create_topic(topic, 1)
    from confluent_kafka.admin import AclBinding, AdminClient

    acls = [AclBinding("GROUP", "alice-group", "LITERAL", "User:alice", "*", "READ", "ALLOW"),
            AclBinding("TOPIC", "alice-topic", "LITERAL", "User:alice", "*", "WRITE", "ALLOW"),
            AclBinding("TOPIC", "alice-topic", "LITERAL", "User:alice", "*", "READ", "ALLOW"),
            AclBinding("GROUP", "alice-share", "LITERAL", "User:alice", "*", "READ", "ALLOW"),
            AclBinding("GROUP", "bob-group", "LITERAL", "User:bob", "*", "READ", "ALLOW"),
            AclBinding("TOPIC", "bob-topic", "LITERAL", "User:bob", "*", "DESCRIBE", "ALLOW")]
    acl_admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # alive until the futures end
    for future in acl_admin.create_acls(acls).values():
        future.result(15)
    broker.sasl_port = ports["SASL_PLAINTEXT"]
    broker.rest = f"http://127.0.0.1:{rest_port}"
    yield broker
    assert broker.alive(), broker.log_tail()
    broker.stop()


def describe_producers(topics: tuple) -> bytes:
    cls = request_class(61, 0)
    return encode_request(61, 0, 7, make(cls, topics=topics))


def indexes(count: int) -> bytes:
    return describe_producers((nested(request_class(61, 0), "TopicRequest")(name="secrets",
                                                                           partition_indexes=tuple(range(count))),))


def names(count: int) -> bytes:
    topic = nested(request_class(61, 0), "TopicRequest")
    return describe_producers(tuple(topic(name=f"{i % 46656:03x}"[-3:], partition_indexes=()) for i in range(count)))


def refused(broker, frame: bytes) -> float:
    """Sends `frame` as alice; asserts the broker closed the connection instead of answering; the seconds it took."""
    with logged_in(broker.sasl_port, "alice", "alice-pw") as sock:
        started = time.monotonic()
        assert exchange(sock, frame) is None, "answered a request over socket.request.max.elements"
        return time.monotonic() - started


def assert_serving(broker) -> None:
    with logged_in(broker.sasl_port, "bob", "bob-pw") as sock:
        frame = exchange(sock, encode_request(18, 0, 99, make(request_class(18, 0))))
        assert frame is not None and struct.unpack_from(">i", frame)[0] == 99


@pytest.mark.parametrize("what, frame", [
    ("1 MiB of int32 partition indexes", lambda: indexes(262_000)),
    ("4 MiB of int32 partition indexes", lambda: indexes(1_048_000)),
    ("4 MiB of 3-byte topic names", lambda: names(830_000)),
])
def test_more_elements_than_the_limit_are_refused_before_any_work(broker, what, frame):
    body = frame()
    stalls = Stalls.of(broker)
    refused_before = broker.metric("dm_requests_refused_total", api="DescribeProducers", reason="elements")
    took = refused(broker, body)
    print(f"{what}: {len(body):,} bytes refused in {took * 1000:.0f} ms; stalls {stalls.since()}")
    assert broker.metric("dm_requests_refused_total", api="DescribeProducers", reason="elements") == refused_before + 1
    assert stalls.since() == {}, f"{what}: the loop stalled"
    assert_serving(broker)


def test_a_request_at_the_limit_is_answered_without_stalling(broker):
    """50,000 partition indexes of a topic alice may not read: 50,000 denials, the loop never late."""
    stalls = Stalls.of(broker)
    with logged_in(broker.sasl_port, "alice", "alice-pw") as sock:
        started = time.monotonic()
        frame = exchange(sock, indexes(ELEMENTS - 1))  # and the topic: the limit
        took = time.monotonic() - started
    assert frame is not None
    _, answer = decode_response(61, 0, frame)
    errors = {p.error_code for t in answer.topics for p in t.partitions}
    print(f"{ELEMENTS} denials ({len(frame):,} bytes) in {took * 1000:.0f} ms; stalls {stalls.since()}")
    assert len(answer.topics[0].partitions) == ELEMENTS - 1
    assert {e.name for e in errors} == {"topic_authorization_failed"}
    assert stalls.since() == {}


@pytest.mark.parametrize("user, at", [("alice", 0), ("admin", 0), ("admin", 1)])
def test_no_api_stalls_the_loop_at_twenty_thousand_elements(broker, user, at):
    """Every API the broker serves, with 20,000 items in its outermost arrays (`at` 0) or in the next ones
    down (`at` 1), from alice (no ACLs: the refusals) and from a super user (the work itself)."""
    stalls = Stalls.of(broker)
    slow = []
    times = []
    for spec in SPECS:
        if spec.key in (17, 36):  # the SASL exchange: not a request after login
            continue
        frame = flood(spec.key, spec.max_version, 20_000, at)
        started = time.monotonic()
        if user == "alice":
            with logged_in(broker.sasl_port, "alice", "alice-pw") as sock:
                sock.settimeout(ANSWER_WAIT_S)
                _answer_or_timeout(sock, frame)
        else:
            import socket

            with socket.create_connection(("127.0.0.1", broker.port), timeout=ANSWER_WAIT_S) as sock:
                _answer_or_timeout(sock, frame)
        took = time.monotonic() - started
        times.append((round(took, 2), spec.name))
        grown = stalls.since()
        if grown:
            slow.append((spec.name, grown, took))
            stalls = Stalls.of(broker)
    print(f"{user}, arrays {at} deep: the longest answers (s) {sorted(times, reverse=True)[:6]}")
    assert slow == [], f"the loop stalled on {slow}"
    assert_serving(broker)


PROBE_ID = 9999
PROBE = encode_request(18, 0, PROBE_ID, make(request_class(18, 0)))  # ApiVersions: answered in order, after


def _answer_or_timeout(sock, frame: bytes) -> None:
    """Sends the request and an ApiVersions behind it, and reads until that one is answered (an acks=0
    produce has no answer of its own), the broker closes the connection, or ANSWER_WAIT_S pass (a join waits
    for its rebalance)."""
    try:
        sock.sendall(frame + PROBE)
        while (answer := read_frame(sock)) is not None:
            if struct.unpack_from(">i", answer)[0] == PROBE_ID:
                return
    except (TimeoutError, ConnectionError):
        pass


def heartbeat(regex: str) -> bytes:
    cls = request_class(68, 1)  # v1: the regex (KIP-848's final form); the client makes up its member id
    return encode_request(68, 1, 5, make(cls, group_id="alice-group", member_id=str(uuid.uuid4()), member_epoch=0,
                                         instance_id=None, rack_id=None,
                                         rebalance_timeout=datetime.timedelta(seconds=60), subscribed_topic_names=None,
                                         subscribed_topic_regex=regex, server_assignor=None, topic_partitions=None))


def heartbeat_answer(broker, regex: str) -> tuple[object, float]:
    """alice's heartbeat with `regex`, asked again while the group's coordinator is not loaded yet; the answer
    and how long the last one took."""
    deadline = time.monotonic() + 60
    with logged_in(broker.sasl_port, "alice", "alice-pw") as sock:
        find = request_class(10, 4)  # FindCoordinator: the offsets topic is made for the first group
        exchange(sock, encode_request(10, 4, 3, make(find, key_type=0, coordinator_keys=("alice-group",))))
        while True:
            started = time.monotonic()
            frame = exchange(sock, heartbeat(regex))
            took = time.monotonic() - started
            assert frame is not None
            _, answer = decode_response(68, 1, frame)
            if answer.error_code.name not in ("not_coordinator", "coordinator_not_available",
                                              "coordinator_load_in_progress") or time.monotonic() > deadline:
                return answer, took
            time.sleep(0.2)


@pytest.mark.parametrize("regex", ["(.|.)*X0", "(.|.|.)*X0", "(t|t?)*" + "t" * 30 + "X"])
def test_a_subscription_regex_takes_linear_time(broker, regex):
    stalls = Stalls.of(broker)
    answer, took = heartbeat_answer(broker, regex)
    print(f"{regex!r}: answered {answer.error_code.name} ({answer.error_message}) in {took * 1000:.0f} ms")
    assert answer.error_code.name == "none"
    assert stalls.since() == {}


@pytest.mark.parametrize("regex", ["(a)\\1", "(?=orders).*", "[", "x" * 5000])
def test_a_regex_re2_refuses_is_invalid_regular_expression(broker, regex):
    answer, _ = heartbeat_answer(broker, regex)
    assert answer.error_code.name == "invalid_regular_expression", answer
    assert "SubscribedTopicRegex" in (answer.error_message or "")


def rest_produce(broker, body: bytes, user: str = "alice") -> requests.Response:
    return requests.post(f"{broker.rest}/topics/alice-topic", data=body, auth=(user, f"{user}-pw"), timeout=60,
                         headers={"Content-Type": "application/vnd.kafka.binary.v2+json"})


def test_a_rest_produce_of_more_records_than_the_limit_is_refused_unparsed(broker):
    body = json.dumps({"records": [{"a": 0}] * 838_855}, separators=(",", ":")).encode()  # 6.7 MB
    stalls = Stalls.of(broker)
    rss_before = rss_mb(broker.proc.pid)
    started = time.monotonic()
    answer = rest_produce(broker, body)
    took = time.monotonic() - started
    grown = rss_mb(broker.proc.pid) - rss_before
    print(f"838,855 records ({len(body):,} bytes): {answer.status_code} in {took * 1000:.0f} ms, RSS +{grown:.0f} MB")
    assert answer.status_code == 422 and "http.produce.max.records" in answer.json()["message"]
    assert stalls.since() == {}
    assert grown < 100, f"the broker grew {grown:.0f} MB for a refused body"


def test_a_rest_produce_at_the_limit_is_written_without_stalling(broker):
    values = [base64.b64encode(f"{i:08d}".encode()).decode() for i in range(10_000)]
    stalls = Stalls.of(broker)
    answer = rest_produce(broker, json.dumps({"records": [{"value": v} for v in values]}).encode())
    assert answer.status_code == 200, answer.text
    offsets = answer.json()["offsets"]
    assert len(offsets) == 10_000 and all(o["error_code"] is None for o in offsets)
    assert stalls.since() == {}


def test_a_rest_produce_is_authorized_before_its_body_is_read(broker):
    answer = rest_produce(broker, json.dumps({"records": [{"value": "QQ=="}]}).encode(), user="bob")
    assert answer.status_code == 403


def test_a_declared_body_over_the_limit_is_413_at_once(broker):
    import socket

    host, port = broker.rest.removeprefix("http://").split(":")
    auth = base64.b64encode(b"alice:alice-pw").decode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"POST /topics/alice-topic HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {auth}\r\n"
                     f"Content-Type: application/vnd.kafka.binary.v2+json\r\nContent-Length: {9 << 20}\r\n\r\n"
                     .encode())
        head = sock.recv(4096).decode(errors="replace")
    assert head.startswith("HTTP/1.1 413"), head


def test_metrics_ask_for_the_rest_listeners_credentials(broker):
    """/metrics names every topic and group: with http.authentication.method=BASIC it asks for credentials and
    DESCRIBE on the cluster (it answered anyone before); the probes stay open for the kubelet."""
    url = f"http://127.0.0.1:{broker.http_port}"
    assert requests.get(f"{url}/metrics", timeout=10).status_code == 401
    assert requests.get(f"{url}/metrics", auth=("alice", "wrong"), timeout=10).status_code == 401
    assert requests.get(f"{url}/metrics", auth=("alice", "alice-pw"), timeout=10).status_code == 403
    scraped = requests.get(f"{url}/metrics", auth=("admin", "admin-pw"), timeout=10)
    assert scraped.status_code == 200 and "dm_partitions" in scraped.text
    assert requests.get(f"{url}/healthz", timeout=10).status_code == 200


def test_made_up_sasl_mechanisms_neither_grow_the_metrics_nor_flood_the_log(broker):
    """3,000 handshakes naming 32 KB made-up mechanisms made 3,000 series and 90.5 MB of log in 3.3 s; now they
    count under mechanism="other" and the log says so a few times a minute."""
    import random
    import socket

    def series() -> int:
        scraped = requests.get(f"http://127.0.0.1:{broker.http_port}/metrics", auth=("admin", "admin-pw"), timeout=10)
        return sum(1 for line in scraped.text.splitlines() if line.startswith("dm_authentications_total"))

    before_series, before_log = series(), broker.log_path.stat().st_size
    for i in range(300):
        name = "".join(random.choices("ABCDEFGHIJ", k=32_000)) + str(i)
        with socket.create_connection(("127.0.0.1", broker.sasl_port), timeout=10) as sock:
            exchange(sock, encode_request(17, 1, 1, make(request_class(17, 1), mechanism=name)))
    grown_series, grown_log = series() - before_series, broker.log_path.stat().st_size - before_log
    print(f"300 made-up mechanisms: {grown_series} more dm_authentications_total series, {grown_log:,} more bytes "
          f"of log")
    assert grown_series <= 1  # mechanism="other"
    assert grown_log < 20_000


@pytest.fixture(scope="module")
def http_broker(tmp_path_factory: pytest.TempPathFactory):
    from harness import BrokerProcess

    rest_port = free_port()
    with BrokerProcess(tmp_path_factory.mktemp("slow-http") / "data",
                       {"http.listeners": f"HTTP://127.0.0.1:{rest_port}", "http.request.timeout.ms": 2000,
                        "max.connections.per.ip": 100}) as broker:
        broker.rest_port = rest_port
        yield broker


def test_connections_trickling_headers_are_closed(http_broker):
    """300 connections sending their headers a byte at a time were all still open after 100 s; now a
    connection that has not sent a whole request within http.request.timeout.ms (2 s here) is closed, on the
    REST listener and on the health and metrics port, and one address holds at most max.connections.per.ip."""
    import socket

    opened = []
    for port in (http_broker.rest_port, http_broker.http_port):
        for _ in range(60):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(b"GET /topics HTTP/1.1\r\nHost: x\r\n")
            opened.append(sock)
    time.sleep(1)
    for sock in opened:
        sock.sendall(b"X")  # still trickling
    deadline = time.monotonic() + 15
    closed = 0
    for sock in opened:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            closed += sock.recv(1) == b""
        except ConnectionError:
            closed += 1
        except TimeoutError:
            pass
        sock.close()
    assert closed == len(opened), f"{len(opened) - closed} trickling connections still open"
    many = [socket.create_connection(("127.0.0.1", http_broker.rest_port), timeout=10) for _ in range(150)]
    try:
        time.sleep(0.5)
        refused = sum(1 for s in many if _closed_now(s))
        assert refused >= 50, f"only {refused} of 150 connections from one address refused (limit 100)"
    finally:
        for s in many:
            s.close()
    assert requests.get(f"http://127.0.0.1:{http_broker.rest_port}/topics", timeout=10).status_code == 200


def _closed_now(sock) -> bool:
    sock.settimeout(0.2)
    try:
        return sock.recv(1) == b""
    except ConnectionError:
        return True
    except TimeoutError:
        return False


def test_a_timestamp_or_partition_past_kafkas_integers_is_a_422(broker):
    """A REST record timestamp of 99999999999999999999999 was a 500 with a traceback (issue 65)."""
    for record in ({"value": "QQ==", "timestamp": 99999999999999999999999}, {"value": "QQ==", "timestamp": 1 << 63},
                   {"value": "QQ==", "partition": 1 << 31}):
        answer = rest_produce(broker, json.dumps({"records": [record]}).encode())
        assert answer.status_code == 422, (record, answer.status_code, answer.text)
    assert "Traceback" not in broker.log_tail(200)


class Share:
    """Share group requests on one logged-in connection (ShareGroupHeartbeat v1, ShareFetch/ShareAcknowledge v1)."""

    def __init__(self, sock, group: str) -> None:
        self.sock, self.group, self.correlation = sock, group, 10

    def call(self, key: int, body: object) -> object:
        return self.call_version(key, 1, body)

    def call_version(self, key: int, version: int, body: object) -> object:
        self.correlation += 1
        frame = exchange(self.sock, encode_request(key, version, self.correlation, body))
        assert frame is not None, "the broker closed the connection"
        return decode_response(key, version, frame)[1]

    def join(self, member: str, topics: tuple[str, ...] = ("alice-topic",)) -> object:
        find = request_class(10, 4)  # FindCoordinator: the first one makes the offsets topic
        self.call_version(10, 4, make(find, key_type=0, coordinator_keys=(self.group,)))
        deadline = time.monotonic() + 30
        while True:
            answer = self.call(76, make(request_class(76, 1), group_id=self.group, member_id=member, member_epoch=0,
                                        rack_id=None, subscribed_topic_names=topics))
            if answer.error_code.name not in ("coordinator_not_available", "not_coordinator",
                                              "coordinator_load_in_progress") or time.monotonic() > deadline:
                return answer
            time.sleep(0.2)

    def fetch(self, member: str, epoch: int, topic_id: uuid.UUID | None = None, acks: tuple = ()) -> object:
        cls = request_class(78, 1)
        topics = () if topic_id is None else (make(nested(cls, "FetchTopic"), topic_id=topic_id, partitions=(
            make(nested(cls, "FetchPartition"), partition_index=0, acknowledgement_batches=acks),)),)
        return self.call(78, make(cls, group_id=self.group, member_id=member, share_session_epoch=epoch,
                                  max_wait=datetime.timedelta(milliseconds=500), min_bytes=1, max_bytes=1 << 20,
                                  max_records=100, batch_size=100, topics=topics, forgotten_topics_data=()))

    def close_session(self, member: str) -> object:
        return self.call(79, make(request_class(79, 1), group_id=self.group, member_id=member,
                                  share_session_epoch=-1, topics=()))


def test_share_sessions_belong_to_their_members_connections(broker):
    """bob, with READ on his own group only, opened 1,999 share sessions in 0.9 s for member ids that never joined,
    after which alice got SHARE_SESSION_LIMIT_REACHED; his ShareAcknowledge with epoch -1 naming alice's member id
    released her records and closed her session (issue 65). Now a session is opened only by a member of the group,
    for its connection, and ends with it; a group holds at most group.share.max.size (20 here) sessions."""
    with logged_in(broker.sasl_port, "bob", "bob-pw") as bob_sock:
        bob = Share(bob_sock, "bob-group")
        assert bob.join("bob-0", ("bob-topic",)).error_code.name == "none"
        refused = [bob.fetch(f"ghost-{i}", 0).error_code.name for i in range(50)]
        assert set(refused) == {"unknown_member_id"}, refused  # never joined: no session
        joined = [bob.join(f"bob-{i}", ("bob-topic",)).error_code.name for i in range(1, 25)]
        assert joined.count("none") == 19 and set(joined) == {"none", "group_max_size_reached"}, joined
        assert {bob.fetch(f"bob-{i}", 0).error_code.name for i in range(20)} == {"none"}
        with logged_in(broker.sasl_port, "alice", "alice-pw") as alice_sock:
            alice = Share(alice_sock, "alice-share")
            joined_alice = alice.join("alice-1")
            assert joined_alice.error_code.name == "none"
            topic_id = joined_alice.assignment.topic_partitions[0].topic_id
            assert alice.fetch("alice-1", 0, topic_id).error_code.name == "none"  # from the log end on
            rest_produce(broker, json.dumps({"records": [{"value": "QQ=="}] * 20}).encode())
            fetched = alice.fetch("alice-1", 1)
            assert fetched.error_code.name == "none", fetched
            held = [a for r in fetched.responses for p in r.partitions for a in p.acquired_records]
            assert held, "alice acquired nothing"
            # bob naming alice's member id: her session is not his to use or close
            assert Share(bob_sock, "alice-share").close_session("alice-1").error_code.name in (
                "group_authorization_failed", "share_session_not_found")
            with logged_in(broker.sasl_port, "alice", "alice-pw") as other:  # alice's own other connection
                assert Share(other, "alice-share").close_session("alice-1").error_code.name == \
                    "share_session_not_found"
            assert alice.fetch("alice-1", 2).error_code.name == "none"  # still hers, at the next epoch
        # alice's connection closed: the records she held are offered again at once, not after the lock's 30 s
        with logged_in(broker.sasl_port, "alice", "alice-pw") as again_sock:
            again = Share(again_sock, "alice-share")
            assert again.join("alice-2").error_code.name == "none"
            deadline = time.monotonic() + 10
            taken = 0
            epoch = 0
            while taken < 20 and time.monotonic() < deadline:
                answer = again.fetch("alice-2", epoch, topic_id if epoch == 0 else None)
                assert answer.error_code.name == "none", answer
                taken += sum(a.last_offset - a.first_offset + 1 for r in answer.responses for p in r.partitions
                             for a in p.acquired_records)
                epoch += 1
            assert taken >= 20, f"only {taken} records offered again after alice's connection closed"
