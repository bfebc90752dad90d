"""ACLs with Kafka's authorizer semantics, through real clients on a SASL listener: what a principal
may read, write, join, describe; prefixed and wildcard ACLs; deny beats allow; super users; Metadata
hiding topics; the ACL APIs themselves (and SECURITY_DISABLED without an authorizer)."""

from __future__ import annotations

import contextlib
import time

import pytest
from clients import ConfluentClient
from secure import secure_broker
from secure_clients import Credentials, confluent_round_trip, kafka_python_round_trip

pytestmark = pytest.mark.timeout(240)
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-pw" '
        'user_alice="alice-pw" user_bob="bob-pw" user_carol="carol-pw";')


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory):
    broker, ports = secure_broker(tmp_path_factory.mktemp("acls") / "data",
                                  {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT"}, {
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        # the PLAINTEXT listener is the inter-broker one (and the test harness's): its ANONYMOUS principal
        # is a super user, as Kafka needs the brokers' principal to be
        "super.users": "User:ANONYMOUS;User:admin",
    })
    broker.start()
    admin = ConfluentClient(broker.bootstrap)
    for topic, partitions in (("orders", 1), ("payments", 1), ("logs-a", 1), ("logs-b", 1), ("metrics", 1),
                              ("secret", 1), ("free", 1)):
        admin.create_topic(topic, partitions)
    yield broker, f"127.0.0.1:{ports['SASL_PLAINTEXT']}"
    broker.stop()


def user(name: str) -> Credentials:
    return Credentials("SASL_PLAINTEXT", mechanism="PLAIN", username=name, password=f"{name}-pw")


def acl(restype: str, name: str, principal: str, operation: str, permission: str = "ALLOW",
        pattern: str = "LITERAL"):
    from confluent_kafka.admin import AclBinding

    return AclBinding(restype, name, pattern, principal, "*", operation, permission)


def create_acls(bootstrap: str, acls: list, creds: Credentials | None = None) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **(creds.librdkafka() if creds else {})})
    for future in admin.create_acls(acls).values():
        future.result(15)


def produce(bootstrap: str, creds: Credentials, topic: str, value: bytes = b"x") -> str | None:
    """None when acknowledged, else the error."""
    from confluent_kafka import KafkaException, Producer

    errors: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, **creds.librdkafka(), "message.timeout.ms": 5000,
                  "enable.idempotence": False})
    try:
        p.produce(topic, value, on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
    except KafkaException as exc:  # librdkafka refuses at once when its metadata already says the topic is denied
        return str(exc)
    p.flush(10)
    return errors[0] if errors else None


def consume_error(bootstrap: str, creds: Credentials, topic: str, group: str) -> str:
    """The first error a consumer of `topic` in `group` meets."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, **creds.librdkafka(), "group.id": group,
                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error():
                return str(msg.error())
        raise AssertionError(f"no error consuming {topic} in {group}")
    finally:
        c.close()


def test_read_on_one_topic_and_group_is_just_that(acl_broker):
    broker, sasl = acl_broker
    create_acls(broker.bootstrap, [acl("TOPIC", "orders", "User:alice", "READ"),
                                   acl("GROUP", "g-alice", "User:alice", "READ")])
    assert produce(broker.bootstrap, Credentials(), "orders", b"o1") is None  # super user (ANONYMOUS)
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": sasl, **user("alice").librdkafka(), "group.id": "g-alice",
                  "auto.offset.reset": "earliest"})
    c.subscribe(["orders"])
    values = []
    deadline = time.monotonic() + 20
    while not values and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is not None and not msg.error():
            values.append(msg.value())
    c.close()
    assert values == [b"o1"]
    assert "TOPIC_AUTHORIZATION_FAILED" in (produce(sasl, user("alice"), "orders") or "")
    assert "TOPIC_AUTHORIZATION_FAILED" in consume_error(sasl, user("alice"), "payments", "g-alice")
    assert "GROUP_AUTHORIZATION_FAILED" in consume_error(sasl, user("alice"), "orders", "another-group")


def test_metadata_shows_only_what_a_principal_may_describe(acl_broker):
    from confluent_kafka.admin import AdminClient

    broker, sasl = acl_broker
    create_acls(broker.bootstrap, [acl("TOPIC", "metrics", "User:carol", "DESCRIBE")])
    seen = AdminClient({"bootstrap.servers": sasl, **user("carol").librdkafka()}).list_topics(timeout=10).topics
    assert set(seen) == {"metrics"}
    everything = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10).topics
    assert {"orders", "payments", "secret", "metrics"} <= set(everything)


def test_prefixed_acls_and_wildcards(acl_broker):
    broker, sasl = acl_broker
    create_acls(broker.bootstrap, [acl("TOPIC", "logs-", "User:bob", "WRITE", pattern="PREFIXED")])
    assert produce(sasl, user("bob"), "logs-a") is None
    assert produce(sasl, user("bob"), "logs-b") is None
    assert "TOPIC_AUTHORIZATION_FAILED" in (produce(sasl, user("bob"), "metrics") or "")


def test_deny_beats_allow_and_no_acl_means_no_access(acl_broker):
    broker, sasl = acl_broker
    create_acls(broker.bootstrap, [acl("TOPIC", "*", "User:alice", "WRITE"),
                                   acl("TOPIC", "secret", "User:alice", "WRITE", permission="DENY")])
    assert produce(sasl, user("alice"), "payments") is None  # the wildcard allows it
    assert "TOPIC_AUTHORIZATION_FAILED" in (produce(sasl, user("alice"), "secret") or "")
    # carol: no ACL names "free" for her (allow.everyone.if.no.acl.found is false)
    assert "TOPIC_AUTHORIZATION_FAILED" in (produce(sasl, user("carol"), "free") or "")


def test_super_users_may_do_everything(acl_broker, topic_name):
    _broker, sasl = acl_broker
    admin = user("admin")
    assert sorted(confluent_round_trip(sasl, admin, topic_name, [b"a", b"b"])) == [b"a", b"b"]
    assert sorted(kafka_python_round_trip(sasl, admin, topic_name + "-kp", [b"c"])) == [b"c"]


def test_acl_apis_describe_delete_and_need_cluster_rights(acl_broker):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AclBindingFilter, AdminClient

    broker, sasl = acl_broker
    create_acls(broker.bootstrap, [acl("TOPIC", "payments", "User:dave", "READ"),
                                   acl("GROUP", "pay-", "User:dave", "READ", pattern="PREFIXED")])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    every = AclBindingFilter("ANY", None, "ANY", "User:dave", None, "ANY", "ANY")
    found = admin.describe_acls(every).result(15)
    assert {(b.restype.name, b.name, b.resource_pattern_type.name) for b in found} == {
        ("TOPIC", "payments", "LITERAL"), ("GROUP", "pay-", "PREFIXED")}
    # MATCH: the ACLs that apply to group "pay-team" (the prefixed one)
    match = admin.describe_acls(AclBindingFilter("GROUP", "pay-team", "MATCH", None, None, "ANY", "ANY")).result(15)
    assert [(b.name, b.principal) for b in match] == [("pay-", "User:dave")]
    deleted = admin.delete_acls([every])[every].result(15)
    assert len(deleted) == 2
    assert admin.describe_acls(every).result(15) == []
    # alice is no super user: she may not create ACLs
    with pytest.raises(KafkaException, match=r"CLUSTER_AUTHORIZATION_FAILED|[Aa]uthoriz"):
        create_acls(sasl, [acl("TOPIC", "payments", "User:alice", "READ")], user("alice"))
    # a malformed ACL is refused, not stored
    with pytest.raises(KafkaException):
        create_acls(broker.bootstrap, [acl("BROKER", "not-the-cluster", "User:alice", "ALTER")])


def test_idempotent_and_transactional_producers_need_their_rights(acl_broker):
    from confluent_kafka import KafkaException, Producer

    broker, sasl = acl_broker
    # carol may describe "metrics" but write nowhere: no producer id for her idempotent producer; bob may write
    # to logs-* (ACLs earlier tests of this file make too, made here again so that this test runs alone)
    create_acls(broker.bootstrap, [acl("TOPIC", "metrics", "User:carol", "DESCRIBE"),
                                   acl("TOPIC", "logs-", "User:bob", "WRITE", pattern="PREFIXED")])
    errors: list[str] = []
    p = Producer({"bootstrap.servers": sasl, **user("carol").librdkafka(), "enable.idempotence": True,
                  "message.timeout.ms": 5000, "error_cb": lambda err: errors.append(str(err))})
    p.produce("metrics", b"x")
    try:
        p.flush(10)
    except (KafkaException, SystemError) as exc:  # librdkafka raises the fatal error it got
        errors += [str(exc), str(exc.__cause__)]
    # flush may raise for the failed delivery before the fatal error's callback was served (seen in a run
    # beside other tests, 2026-12-02): serve it
    with contextlib.suppress(KafkaException, SystemError):
        p.poll(1)
    assert any("CLUSTER_AUTHORIZATION_FAILED" in e or "Cluster authorization failed" in e for e in errors), errors
    # bob writes to logs-* (so he gets a producer id) but has no transactional id
    p = Producer({"bootstrap.servers": sasl, **user("bob").librdkafka(), "transactional.id": "bob-tx"})
    with pytest.raises(KafkaException, match=r"TRANSACTIONAL_ID_AUTHORIZATION_FAILED|[Aa]uthoriz"):
        p.init_transactions(10)
    create_acls(broker.bootstrap, [acl("TRANSACTIONAL_ID", "bob-tx", "User:bob", "WRITE")])
    p = Producer({"bootstrap.servers": sasl, **user("bob").librdkafka(), "transactional.id": "bob-tx"})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce("logs-a", b"in-txn")
    p.commit_transaction(15)


def test_without_an_authorizer_the_acl_apis_say_so(broker):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with pytest.raises(KafkaException, match=r"SECURITY_DISABLED|[Ss]ecurity"):
        for future in admin.create_acls([acl("TOPIC", "x", "User:alice", "READ")]).values():
            future.result(15)
