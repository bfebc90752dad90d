"""The pure parts of security: listeners, principal mapping rules, JAAS, ACL semantics, SCRAM
credentials, SASL exchanges (no sockets)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dm_broker.config import BrokerConfig, ConfigError, read_properties
from dm_broker.security.acls import (
    AclBinding,
    AclFilter,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    validate,
)
from dm_broker.security.jaas import parse_jaas
from dm_broker.security.listeners import listener_setup
from dm_broker.security.principal import Principal, PrincipalMapper, user
from dm_broker.security.sasl import AuthenticationFailed, Authenticator, SaslSettings
from dm_broker.security.scram import from_password, from_salted_password, salted_password, verify_password

T, G, C, TX = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID


def config(**values: object) -> BrokerConfig:
    return BrokerConfig.build({k.replace("__", "."): v for k, v in values.items()}, environ={})


# -- listeners --------------------------------------------------------------------------------------


def test_without_listeners_one_plaintext_listener_from_the_shorthand():
    setup = listener_setup(config(**{"listener.port": 9093, "advertised.host": "b0.example"}))
    (li,) = setup.listeners
    assert (li.name, li.port, li.security_protocol, li.advertised_host) == ("PLAINTEXT", 9093, "PLAINTEXT",
                                                                            "b0.example")
    assert setup.inter_broker == "PLAINTEXT"


def test_kafka_listeners_advertised_and_the_inter_broker_one():
    setup = listener_setup(config(**{
        "listeners": "INTERNAL://:9091,EXTERNAL://0.0.0.0:9094,CLIENTS://[::1]:9095",
        "advertised.listeners": "INTERNAL://b0.svc:9091,EXTERNAL://kafka.example.com:31094",
        "listener.security.protocol.map": "INTERNAL:SSL,EXTERNAL:SASL_SSL,CLIENTS:PLAINTEXT",
        "inter.broker.listener.name": "internal", "advertised.host": "b0.local",
        "ssl.keystore.location": __file__,
    }))
    by = {li.name: li for li in setup.listeners}
    assert (by["EXTERNAL"].advertised_host, by["EXTERNAL"].advertised_port) == ("kafka.example.com", 31094)
    assert by["EXTERNAL"].tls and by["EXTERNAL"].sasl and not by["CLIENTS"].tls
    assert (by["CLIENTS"].host, by["CLIENTS"].advertised_host) == ("::1", "::1")
    assert setup.inter_broker == "INTERNAL"


@pytest.mark.parametrize("values, message", [
    ({"listeners": "PLAINTEXT:9092"}, "NAME://host:port"),
    ({"listeners": "A://:1,A://:2"}, "once"),
    ({"listeners": "WEIRD://:9092"}, "no security protocol"),
    ({"listeners": "PLAINTEXT://:9092", "listener.security.protocol.map": "PLAINTEXT:TLS"}, "NAME:PROTOCOL"),
    ({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "OTHER://h:1"}, "does not define"),
    ({"listeners": "PLAINTEXT://0.0.0.0:9092"}, "advertised"),
    ({"listeners": "PLAINTEXT://:9092,SSL://:9093", "inter.broker.listener.name": "NOPE",
      "advertised.host": "h"}, "not one of the listeners"),
    ({"listeners": "PLAINTEXT://:9092", "listener.port": 9093, "advertised.host": "h"}, "cannot be combined"),
    ({"listeners": "SASL_PLAINTEXT://:9092", "advertised.host": "h", "sasl.enabled.mechanisms": "GSSAPI"},
     "not supported"),
    ({"listeners": "A://h:9092,B://h:9092", "listener.security.protocol.map": "A:PLAINTEXT,B:PLAINTEXT"},
     "same host and port"),
])
def test_listener_configurations_kafka_would_refuse(values, message):
    with pytest.raises(ConfigError, match=message):
        listener_setup(config(**values))


def test_listener_scoped_properties():
    c = config(**{"listener.name.SASL_SSL.ssl.client.auth": "required",
                  "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": "x required;"})
    assert c.for_listener("sasl_ssl", "ssl.client.auth") == "required"
    assert c.for_listener("OTHER", "ssl.client.auth") == "none"
    assert c.jaas_config("SASL_SSL", "SCRAM-SHA-512") == "x required;"
    with pytest.raises(ConfigError, match="cannot be set per listener"):
        config(**{"listener.name.a.log.retention.ms": "1"})
    with pytest.raises(ConfigError, match="must be one of"):
        config(**{"listener.name.a.ssl.client.auth": "sometimes"})


def test_properties_files_continue_lines_as_java_does(tmp_path: Path):
    f = tmp_path / "server.properties"
    f.write_text("# comment\nlistener.name.sasl_plaintext.plain.sasl.jaas.config=org.x.PlainLoginModule required \\\n"
                 '    user_admin="a" \\\n    user_bob="b";\n! other comment\nsuper.users=User:admin\n')
    props = read_properties(f)
    assert props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] == \
        'org.x.PlainLoginModule required user_admin="a" user_bob="b";'
    assert props["super.users"] == "User:admin"


# -- principals ------------------------------------------------------------------------------------


def test_principal_mapping_rules_as_kafka_documents_them():
    mapper = PrincipalMapper(r"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),"
                             r"ST=(.*?),C=(.*?)$/$1@$2/L,RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,DEFAULT")
    assert mapper.name("CN=kafka-server1,OU=ServiceUsers,O=Org,C=US") == "kafka-server1"
    assert mapper.name("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US") == "duke@javasoft"
    assert mapper.name("OU=x,CN=adminuser,O=y") == "ADMINUSER"
    assert PrincipalMapper("DEFAULT").name("CN=a,O=b") == "CN=a,O=b"
    strict = PrincipalMapper(r"RULE:^CN=(.*?),O=dm$/$1/")
    with pytest.raises(ValueError, match=r"no ssl\.principal\.mapping\.rules rule"):
        strict.name("CN=x,O=other")
    with pytest.raises(ConfigError):
        PrincipalMapper("RULE:broken")
    assert str(Principal.parse("User:alice")) == "User:alice"
    with pytest.raises(ValueError):
        Principal.parse("alice")


def test_jaas_configurations():
    jaas = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
                      'password="admin-secret" user_admin="admin-secret" user_alice="a\\"b";')
    assert jaas.users == {"admin": "admin-secret", "alice": 'a"b'}
    assert jaas.client_credentials == ("admin", "admin-secret")
    assert parse_jaas("").users == {}
    for bad in ("user_a=b;", 'Module required user_a="b"', 'Module required user_a="b" ='):
        with pytest.raises(ConfigError):
            parse_jaas(bad)


# -- ACLs --------------------------------------------------------------------------------------------


def binding(rtype: ResourceType, name: str, principal: str, op: Operation, permission: Permission = Permission.ALLOW,
            pattern: PatternType = PatternType.LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(resource_type=rtype, resource_name=name, pattern_type=pattern, principal=principal, host=host,
                      operation=op, permission=permission)


ALICE, BOB = user("alice"), user("bob")


def test_authorizer_semantics():
    authz = Authorizer([
        binding(T, "orders", "User:alice", Operation.READ),
        binding(T, "logs-", "User:alice", Operation.WRITE, pattern=PatternType.PREFIXED),
        binding(T, "*", "User:bob", Operation.ALL),
        binding(T, "secret", "User:bob", Operation.READ, Permission.DENY),
        binding(G, "g", "User:*", Operation.READ),
        binding(T, "hosts", "User:alice", Operation.READ, host="10.0.0.1"),
        binding(T, "cfg", "User:alice", Operation.ALTER_CONFIGS),
    ], super_users=["User:admin"])
    ok = authz.authorize
    assert ok(ALICE, "h", Operation.READ, T, "orders") and not ok(ALICE, "h", Operation.WRITE, T, "orders")
    assert ok(ALICE, "h", Operation.DESCRIBE, T, "orders")  # READ implies DESCRIBE
    assert ok(ALICE, "h", Operation.WRITE, T, "logs-1") and not ok(ALICE, "h", Operation.WRITE, T, "log")
    assert ok(BOB, "h", Operation.DELETE, T, "anything")  # wildcard name, ALL operations
    assert not ok(BOB, "h", Operation.READ, T, "secret") and ok(BOB, "h", Operation.WRITE, T, "secret")  # deny wins
    assert ok(BOB, "h", Operation.DESCRIBE, T, "secret")  # a DENY of READ does not deny DESCRIBE
    assert ok(user("zed"), "h", Operation.READ, G, "g")  # User:*
    assert ok(ALICE, "10.0.0.1", Operation.READ, T, "hosts") and not ok(ALICE, "10.0.0.2", Operation.READ, T, "hosts")
    assert ok(ALICE, "h", Operation.DESCRIBE_CONFIGS, T, "cfg")  # ALTER_CONFIGS implies DESCRIBE_CONFIGS
    assert ok(user("admin"), "h", Operation.ALTER, C, "kafka-cluster")  # super user
    assert not ok(ALICE, "h", Operation.READ, T, "unnamed")  # no ACL: denied by default
    assert Authorizer([], allow_if_no_acl=True).authorize(ALICE, "h", Operation.READ, T, "unnamed")
    # allow.everyone.if.no.acl.found applies only where no ACL at all names the resource
    assert not Authorizer([binding(T, "x", "User:bob", Operation.READ)], allow_if_no_acl=True).authorize(
        ALICE, "h", Operation.READ, T, "x")
    assert authz.authorize_any(ALICE, "h", Operation.WRITE, T)
    assert not authz.authorize_any(user("carol"), "h", Operation.WRITE, T)
    ops = authz.operations(ALICE, "h", T, "orders")
    assert ops == (1 << Operation.READ) | (1 << Operation.DESCRIBE)


def test_acl_filters_and_validation():
    acls = [binding(T, "orders", "User:alice", Operation.READ),
            binding(T, "ord", "User:bob", Operation.WRITE, pattern=PatternType.PREFIXED),
            binding(T, "*", "User:carol", Operation.READ),
            binding(G, "orders", "User:alice", Operation.READ)]
    match = AclFilter(resource_type=T, resource_name="orders", pattern_type=PatternType.MATCH)
    assert [a.principal for a in acls if match.matches(a)] == ["User:alice", "User:bob", "User:carol"]
    exact = AclFilter(resource_type=T, resource_name="ord", pattern_type=PatternType.PREFIXED)
    assert [a.principal for a in acls if exact.matches(a)] == ["User:bob"]
    assert sum(AclFilter(principal="User:alice").matches(a) for a in acls) == 2
    assert validate(acls[0]) is None
    assert "CLUSTER" in validate(binding(C, "other", "User:a", Operation.ALTER))
    assert validate(binding(T, "x", "alice", Operation.READ)) is not None  # no principal type
    assert validate(binding(T, "*", "User:a", Operation.READ, pattern=PatternType.PREFIXED)) is not None
    assert validate(binding(T, "x", "User:a", Operation.ANY)) is not None


# -- SCRAM and SASL ------------------------------------------------------------------------------------


def test_scram_credentials_match_scramp_and_kip_554():
    from scramp import ScramMechanism

    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        salt = b"0123456789abcdef"
        ours = from_password(mechanism, "pw", 4096, salt)
        salt_, stored, server, iterations = ScramMechanism(mechanism).make_auth_info("pw", 4096, salt)
        assert ours.raw() == (salt_, stored, server, iterations)
        # what AlterUserScramCredentials carries: the salted password
        assert from_salted_password(mechanism, salt, salted_password(mechanism, "pw", salt, 4096), 4096) == ours
        assert verify_password(ours, "pw") and not verify_password(ours, "pW")


def sasl(mechanisms: list[str], users: dict[str, str] | None = None, creds: dict | None = None) -> Authenticator:
    return Authenticator(SaslSettings(mechanisms, users or {}, lambda u, m: (creds or {}).get((u, m)), 1024))


async def test_sasl_exchanges_and_their_refusals():
    from scramp import ScramClient

    creds = {("bob", "SCRAM-SHA-512"): from_password("SCRAM-SHA-512", "bob-pw")}
    a = sasl(["PLAIN", "SCRAM-SHA-512"], {"alice": "alice-pw"}, creds)
    assert not a.handshake("SCRAM-SHA-256") and not a.handshake("GSSAPI")
    assert a.handshake("PLAIN") and await a.step(b"\0alice\0alice-pw") == b"" and a.principal == user("alice")
    for token, message in ((b"\0alice\0wrong", "Invalid username or password"),
                           (b"\0mallory\0x", "Invalid username or password"),
                           (b"admin\0alice\0alice-pw", "authorization id"),
                           (b"alice-pw", "expected 3 tokens"), (b"\0\0pw", "username not specified"),
                           (b"x" * 2000, "sasl.server.max.receive.size")):
        a.handshake("PLAIN")
        with pytest.raises(AuthenticationFailed, match=message):
            await a.step(token)
    a.handshake("PLAIN")
    assert await a.step(b"\0bob\0bob-pw") == b"" and a.principal == user("bob")  # PLAIN falls back to SCRAM users
    a.handshake("SCRAM-SHA-512")
    client = ScramClient(["SCRAM-SHA-512"], "bob", "bob-pw")
    client.set_server_first((await a.step(client.get_client_first().encode())).decode())
    client.set_server_final((await a.step(client.get_client_final().encode())).decode())  # verifies the server's proof
    assert a.principal == user("bob")
    with pytest.raises(AuthenticationFailed, match="already complete"):
        await a.step(b"more")
    a.handshake("SCRAM-SHA-512")
    wrong = ScramClient(["SCRAM-SHA-512"], "bob", "nope")
    wrong.set_server_first((await a.step(wrong.get_client_first().encode())).decode())
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        await a.step(wrong.get_client_final().encode())
    assert a.principal is None
    with pytest.raises(AuthenticationFailed, match="before SaslHandshake"):
        await sasl(["PLAIN"]).step(b"\0a\0b")


def test_failures_slow_down_the_same_user_or_address_only():
    from dm_broker.security.login_guard import BASE_DELAY_S, FREE_FAILURES, MAX_DELAY_S, FailureTracker

    now = [1000.0]
    tracker = FailureTracker(clock=lambda: now[0])
    for _ in range(FREE_FAILURES):
        tracker.record("user:alice", "host:10.0.0.9")
    assert tracker.delay("user:alice", "host:10.0.0.1") == 0  # a few failures are free
    tracker.record("user:alice", "host:10.0.0.9")
    assert tracker.delay("user:alice", "host:10.0.0.1") == BASE_DELAY_S  # by user name, from anywhere
    assert tracker.delay("user:bob", "host:10.0.0.9") == BASE_DELAY_S  # by address, for any user
    assert tracker.delay("user:bob", "host:10.0.0.1") == 0
    for _ in range(20):
        tracker.record("user:alice", "host:10.0.0.9")
    assert tracker.delay("user:alice", "host:x") == MAX_DELAY_S  # bounded
    now[0] += 61  # the window passed
    assert tracker.delay("user:alice", "host:10.0.0.9") == 0


async def test_password_hashing_leaves_the_event_loop_free():
    """PLAIN against a SCRAM user (PBKDF2, here 100k rounds) runs in the guard's threads: the loop keeps
    ticking meanwhile. Hashing on the loop lets no tick run once the hash has begun, so at most the one or two
    ticks before it fall inside the step. Timing-based forms of this check (a share of the ideal tick rate, the
    longest gap under half the hash's time) failed on loaded machines: 43 ticks of 193 ideal, and a 145 ms gap
    in a 284 ms hash, both with the hash in its thread (make test, 2026-12-02)."""
    import asyncio
    import time

    from dm_broker.security.login_guard import LoginGuard

    guard = LoginGuard()
    creds = {("bob", "SCRAM-SHA-512"): from_password("SCRAM-SHA-512", "bob-pw", iterations=100_000)}
    a = Authenticator(SaslSettings(["PLAIN"], {}, lambda u, m: creds.get((u, m)), 1024), "10.0.0.1", guard)
    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            await asyncio.sleep(0.001)
            ticks.append(time.perf_counter())

    task = asyncio.ensure_future(ticker())
    try:
        a.handshake("PLAIN")
        await asyncio.sleep(0.01)  # the ticker runs
        started = time.perf_counter()
        assert await a.step(b"\0bob\0bob-pw") == b""
        ended = time.perf_counter()
        during = [t for t in ticks if started < t < ended]
        assert len(during) >= 8, (len(during), ended - started)  # the loop ran while the hash did
    finally:
        task.cancel()
        guard.close()
