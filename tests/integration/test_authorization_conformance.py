"""Every API dm serves, sent over a real SASL listener by three principals, against Kafka's rules
(tests/kafka_acl_rules.py): unauthenticated (only ApiVersions, SaslHandshake and SaslAuthenticate are
answered; any other request closes the connection), authenticated without ACLs (refused with an
authorization error, or answered without what it may not see), and authenticated with exactly the ACLs
Kafka requires (no authorization error). Plus Kafka's authorizeByResourceType (a prefixed DENY cancels a
literal ALLOW it covers), allow.everyone.if.no.acl.found, and nothing created before authorization."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from clients import ConfluentClient
from dm_broker.protocol.client import KafkaConnection
from dm_broker.security.client_security import ClientSecurity
from kafka_acl_rules import (
    AUTHORIZATION_FAILED,
    DELETED_TOPIC,
    FILTERED_ALSO,
    GROUP,
    MARKER_TOPIC,
    RULES,
    TOPIC,
    TXN,
    error_codes,
    init_producer_id_idempotent,
    init_producer_id_transactional,
    offset_commit,
    req,
)
from secure import secure_broker

pytestmark = pytest.mark.timeout(300)
USERS = ["nobody", "pd", "pa", *(f"u{key}" for key in RULES)]
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required user_admin=\"admin-pw\" "
        + " ".join(f'user_{u}="{u}-pw"' for u in USERS) + ";")
SASL_CONFIG = {
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS;User:admin",  # ANONYMOUS: the PLAINTEXT (inter-broker, harness) listener
}
LISTENERS = {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT"}


def acl_binding(restype: str, name: str, principal: str, operation: str, permission: str = "ALLOW",
                pattern: str = "LITERAL"):
    from confluent_kafka.admin import AclBinding

    return AclBinding(restype, name, pattern, principal, "*", operation, permission)


def create_acls(bootstrap: str, acls: list) -> None:
    from confluent_kafka.admin import AdminClient

    if not acls:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_acls(acls).values():
        future.result(15)


async def connect(port: int, user: str | None) -> KafkaConnection:
    security = ClientSecurity("SASL_PLAINTEXT", None, "PLAIN", user, f"{user}-pw") if user else None
    return await KafkaConnection.open("127.0.0.1", port, "conformance", security=security)


async def ask(port: int, user: str | None, request) -> object:
    conn = await connect(port, user)
    try:
        if int(request.__api_key__) == DESCRIBE_TRANSACTIONS:
            return describe_transactions_errors(await conn.request_frame(request, timeout=15))
        return await conn.request(request, timeout=15)
    finally:
        await conn.close()


DESCRIBE_TRANSACTIONS = 65


@dataclass
class TransactionStateError:
    error_code: int


def describe_transactions_errors(frame) -> TransactionStateError:
    """The error code of a one-id DescribeTransactions v0 answer, read by hand: Kafka (and dm) send -1
    for an unknown start time, which kio's reader refuses to parse as a timestamp."""
    data = bytes(frame)
    offset = 4 + 1 + 4  # correlation id, header tags, throttle time
    assert data[offset] == 2, data  # a compact array of one transaction state
    return TransactionStateError(int.from_bytes(data[offset + 1:offset + 3], "big", signed=True))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    broker, ports = secure_broker(tmp_path_factory.mktemp("conformance") / "data", LISTENERS, SASL_CONFIG)
    broker.start()
    admin = ConfluentClient(broker.bootstrap)
    for topic in (TOPIC, DELETED_TOPIC, MARKER_TOPIC, "pd-orders"):
        admin.create_topic(topic, 1)
    plain = broker.port

    async def setup() -> None:
        # a group with offsets (ListGroups lists it) and a transactional id (ListTransactions lists it)
        for setup_request, key_type in ((offset_commit, 0), (init_producer_id_transactional, 1)):
            for _ in range(60):  # the first FindCoordinator creates the internal topic
                await ask(plain, None, req(10, 4, key_type=key_type, coordinator_keys=(GROUP if key_type == 0
                                                                                      else TXN,)))
                resp = await ask(plain, None, setup_request())
                if error_codes(resp) == {0}:
                    break
                await asyncio.sleep(0.5)
            assert error_codes(resp) == {0}, resp

    asyncio.run(setup())
    yield broker, ports["SASL_PLAINTEXT"]
    broker.stop()


@pytest.mark.parametrize("key", sorted(RULES), ids=lambda k: f"api{k}")
async def test_unauthenticated_gets_only_the_handshake(cluster, key):
    _broker, sasl = cluster
    rule = RULES[key]
    conn = await connect(sasl, None)
    try:
        if rule.public:
            await conn.request(rule.request(), timeout=10)  # answered (an error code is fine)
            return
        with pytest.raises((asyncio.IncompleteReadError, ConnectionError, OSError)):
            await conn.request(rule.request(), timeout=10)
    finally:
        await conn.close()


@pytest.mark.parametrize("key", sorted(k for k, r in RULES.items() if not r.public), ids=lambda k: f"api{k}")
async def test_without_acls_refused_or_filtered(cluster, key):
    _broker, sasl = cluster
    rule = RULES[key]
    resp = await ask(sasl, "nobody", rule.request())
    if rule.hides is not None:
        assert rule.hides(resp), resp
        assert not error_codes(resp) & AUTHORIZATION_FAILED, resp
    else:
        assert error_codes(resp) & AUTHORIZATION_FAILED, resp
    if key in FILTERED_ALSO:
        request, hides = FILTERED_ALSO[key]
        assert hides(await ask(sasl, "nobody", request()))


@pytest.mark.parametrize("key", sorted(k for k, r in RULES.items() if not r.public), ids=lambda k: f"api{k}")
async def test_exactly_kafkas_acls_allow(cluster, key):
    broker, sasl = cluster
    rule = RULES[key]
    principal = f"u{key}"
    create_acls(broker.bootstrap, [acl_binding(t, name, f"User:{principal}", op) for t, name, op in rule.acls])
    resp = await ask(sasl, principal, rule.request())
    assert not error_codes(resp) & AUTHORIZATION_FAILED, resp
    if rule.hides is not None:
        assert not rule.hides(resp), resp
    if key in FILTERED_ALSO:
        request, hides = FILTERED_ALSO[key]
        assert not hides(await ask(sasl, principal, request()))


async def test_a_prefixed_deny_cancels_the_literal_allow_it_covers(cluster):
    """Kafka's authorizeByResourceType: an idempotent producer is admitted with WRITE on some topic,
    unless every such ALLOW is covered by a DENY (here a prefixed one)."""
    broker, sasl = cluster
    create_acls(broker.bootstrap, [
        acl_binding("TOPIC", "pd-orders", "User:pd", "WRITE"),
        acl_binding("TOPIC", "pd-", "User:pd", "WRITE", permission="DENY", pattern="PREFIXED"),
        acl_binding("TOPIC", "pd-orders", "User:pa", "WRITE"),
    ])
    refused = await ask(sasl, "pd", init_producer_id_idempotent())
    assert refused.error_code == 31, refused  # CLUSTER_AUTHORIZATION_FAILED
    admitted = await ask(sasl, "pa", init_producer_id_idempotent())
    assert admitted.error_code == 0, admitted


async def test_allow_everyone_if_no_acl_found(tmp_path):
    broker, ports = secure_broker(tmp_path / "data", LISTENERS,
                                  {**SASL_CONFIG, "allow.everyone.if.no.acl.found": "true"})
    with broker:
        admin = ConfluentClient(broker.bootstrap)
        admin.create_topic("open", 1)
        admin.create_topic("guarded", 1)
        create_acls(broker.bootstrap, [acl_binding("TOPIC", "guarded", "User:pa", "DESCRIBE")])
        sasl = ports["SASL_PLAINTEXT"]
        topics = await ask(sasl, "nobody", req(3, 12, topics=None, allow_auto_topic_creation=False))
        names = {t.name for t in topics.topics}
        assert "open" in names and "guarded" not in names  # an ACL names "guarded": no longer open to all
        assert (await ask(sasl, "nobody", init_producer_id_idempotent())).error_code == 0


async def test_nothing_is_created_before_authorization(tmp_path):
    from dm_broker.protocol.access import empty
    from dm_broker.protocol.codec import request_class

    broker, ports = secure_broker(tmp_path / "data", LISTENERS, SASL_CONFIG)
    with broker:
        sasl = ports["SASL_PLAINTEXT"]
        for key_type, key in ((0, GROUP), (1, TXN)):
            resp = await ask(sasl, "nobody", empty(request_class(10, 4), key_type=key_type, coordinator_keys=(key,)))
            assert resp.coordinators[0].error_code in (30, 53), resp
        every = await ask(broker.port, None, req(3, 12, topics=None, allow_auto_topic_creation=False))
        assert {t.name for t in every.topics} & {"__consumer_offsets", "__transaction_state"} == set()


async def test_a_request_without_a_session_is_refused():
    """The dispatcher has no path that skips authentication: handle() without a session refuses."""
    from dm_broker.protocol.codec import ProtocolError
    from dm_broker.protocol.dispatch import Dispatcher

    dispatcher = Dispatcher.__new__(Dispatcher)
    dispatcher.apis = {}
    with pytest.raises(ProtocolError):
        await dispatcher.handle(b"", "peer", None)  # type: ignore[arg-type]
