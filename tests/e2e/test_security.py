"""A secured DMCluster on kind (issue 22): clients in pods reach it only with the credentials the
operator made for their User — a SCRAM-SHA-512 password over TLS, a client certificate over mutual
TLS — and only for what their ACLs allow; anonymous, unknown and wrongly authenticated clients are
turned away. Under load, the cluster CA and the brokers' certificate are renewed (a validity of
minutes) and every broker serves the new certificate without a restart, and no acknowledged record
is lost."""

from __future__ import annotations

import json
import textwrap
import time

import pytest
from dm import Workload, create_cluster, topic, verdict, wait_topic_ready
from measurements import note
from support import SecretKey, apply, get_json, get_or_none, run_script, wait_until

pytestmark = pytest.mark.timeout(900)

# The CA and what it signs live 8 minutes and are renewed 3 minutes after they are made, so a renewal
# happens while the test runs and the kubelets (which update a Secret volume within their sync period,
# about a minute) bring it to every broker before the next one. A client that loaded the bundle stays
# good for 8 minutes even if it never reloads it (same key).
SECURED = {
    "listeners": [{"name": "plain", "port": 9092},
                  {"name": "scram", "port": 9093, "tls": True, "authentication": "scram-sha-512"},
                  {"name": "mtls", "port": 9094, "tls": True, "authentication": "tls"}],
    "authorization": {"type": "simple"},
    "clusterCa": {"validity": "480s", "renewBefore": "300s"},
}
TOPIC = "payments"
PROBED = "payments-probe"  # the access checks write here, not into the topic the load is verified on


def user(name: str, authentication: str, acls: list[dict]) -> dict:
    return {"apiVersion": "dm.dev/v1alpha1", "kind": "User", "metadata": {"name": name},
            "spec": {"cluster": "demo", "authentication": {"type": authentication},
                     "authorization": {"acls": acls}}}


def acl(kind: str, name: str, *operations: str, pattern: str = "literal") -> dict:
    return {"resource": {"type": kind, "name": name, "patternType": pattern}, "operations": list(operations)}


def listener_bootstrap(cluster: dict, name: str) -> str:
    return next(li["bootstrapServers"] for li in cluster["status"]["listeners"] if li["name"] == name)


# What each client may do, tried from a pod with the Users' Secrets mounted. Each line:
#   RESULT <client> <what it got>
ACCESS = """
import json, os
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

def produce(name, config):
    errors = []
    p = Producer({**config, "message.timeout.ms": 15000, "error_cb": lambda e: errors.append(e.name())})
    results = []
    p.produce(TOPIC, b"probe", on_delivery=lambda err, msg: results.append(err.name() if err else "OK"))
    p.flush(20)
    print("RESULT", name, results[0] if results else "NONE", sorted(set(errors)), flush=True)

def topics(name, config):
    try:
        found = sorted(t for t in AdminClient(config).list_topics(timeout=15).topics if not t.startswith("__"))
        print("RESULT", name, ",".join(found) or "-", flush=True)
    except KafkaException as exc:
        print("RESULT", name, exc.args[0].name(), flush=True)

ca = {"ssl.ca.location": "/ca/ca.crt"}
alice = {**ca, "bootstrap.servers": SCRAM, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
         "sasl.username": "alice", "sasl.password": os.environ["ALICE_PASSWORD"]}
bob = {"bootstrap.servers": MTLS, "security.protocol": "SSL", "ssl.ca.location": "/bob/ca.crt",
       "ssl.certificate.location": "/bob/user.crt", "ssl.key.location": "/bob/user.key"}
produce("anonymous-plain", {"bootstrap.servers": PLAIN})
produce("alice-wrong-password", {**alice, "sasl.password": "not-" + alice["sasl.password"]})
produce("bob-writes", bob)
produce("no-certificate", {**ca, "bootstrap.servers": MTLS, "security.protocol": "SSL"})
produce("alice", alice)
topics("alice-topics", alice)
topics("anonymous-topics", {"bootstrap.servers": PLAIN})
"""


def test_users_reach_a_secured_cluster_with_their_secrets_and_certificates_renew_under_load(operator, e2e_namespace):
    sub, ns = operator, e2e_namespace
    cluster = create_cluster(sub, ns, **SECURED)
    apply(sub, [user("alice", "scram-sha-512", [acl("topic", TOPIC, "Write", "Describe", "Read", pattern="prefix")]),
                user("bob", "tls", [acl("topic", TOPIC, "Read", "Describe"),
                                    acl("group", "verify-", "Read", pattern="prefix")]),
                topic(TOPIC, 3, 3), topic(PROBED, 1, 3)], ns)
    wait_topic_ready(sub, ns, TOPIC)
    wait_topic_ready(sub, ns, PROBED)
    for name in ("alice", "bob"):
        wait_until(lambda n=name: next((c for c in ((get_or_none(sub, "user", n, "-n", ns) or {}).get("status") or {})
                                        .get("conditions", []) if c["type"] == "Ready" and c["status"] == "True"),
                                       None), 60, f"User {name} Ready")
    assert get_json(sub, "user", "bob", "-n", ns)["status"]["principal"] == "User:CN=bob"
    scram, mtls = listener_bootstrap(cluster, "scram"), listener_bootstrap(cluster, "mtls")
    plain = listener_bootstrap(cluster, "plain")

    preamble = f"TOPIC, PLAIN, SCRAM, MTLS = {PROBED!r}, {plain!r}, {scram!r}, {mtls!r}\n"
    out = run_script(sub, ns, preamble + textwrap.dedent(ACCESS), image=sub.image, timeout_s=240,
                     env={"ALICE_PASSWORD": SecretKey("alice", "password")},
                     secrets={"demo-cluster-ca-cert": "/ca", "bob": "/bob"})
    results = {line.split()[1]: line.split(maxsplit=2)[2] for line in out.splitlines() if line.startswith("RESULT ")}
    note("[kind] secured cluster access: " + "; ".join(f"{k} -> {v}" for k, v in results.items()))
    assert results["anonymous-plain"].startswith("TOPIC_AUTHORIZATION_FAILED"), results
    assert "_AUTHENTICATION" in results["alice-wrong-password"], results
    assert results["bob-writes"].startswith("TOPIC_AUTHORIZATION_FAILED"), results
    assert results["no-certificate"].startswith("_MSG_TIMED_OUT"), results  # the handshake is refused
    assert results["alice"].startswith("OK"), results
    assert results["alice-topics"] == f"{TOPIC},{PROBED}", results
    assert results["anonymous-topics"] == "-", results  # Describe filters the metadata

    def brokers() -> dict[str, tuple[str, int]]:
        selector = "app.kubernetes.io/instance=demo,app.kubernetes.io/component=broker"
        pods = get_json(sub, "pods", "-n", ns, "-l", selector)["items"]
        return {p["metadata"]["name"]: (p["metadata"]["uid"], sum(c.get("restartCount", 0) for c in
                                                                   p["status"].get("containerStatuses", [])))
                for p in pods}

    before = brokers()
    status = get_json(sub, "dmcluster", "demo", "-n", ns)["status"]
    first_certificate = status["certificates"]["brokerCertificate"]
    first_ca_expiry = status["certificates"]["clusterCaExpires"]
    alice_config = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
                    "sasl.password": "$PASSWORD", "ssl.ca.location": "/ca/ca.crt"}
    producer = Workload(sub, ns, "producer.py", {"BOOTSTRAP": scram, "TOPIC": TOPIC, "RATE": 200,
                                                 "CLIENT_CONFIG": json.dumps(alice_config),
                                                 "PASSWORD": SecretKey("alice", "password")},
                        secrets={"demo-cluster-ca-cert": "/ca"})
    producer.wait_for("START", 120)

    issued: dict[str, float] = {}  # certificate -> when the status first named it

    def renewed_everywhere() -> dict | None:
        s = get_json(sub, "dmcluster", "demo", "-n", ns)["status"]
        current = s["certificates"]["brokerCertificate"]
        issued.setdefault(current, time.monotonic())
        served = {b["id"]: b.get("certificate") for b in s["brokers"]}
        return s if current != first_certificate and set(served.values()) == {current} else None

    renewed = wait_until(renewed_everywhere, 480, "every broker serving a renewed certificate", interval_s=2)
    since_renewal = len(producer.lines)
    reached = time.monotonic() - issued[renewed["certificates"]["brokerCertificate"]]
    note(f"[kind] broker certificate renewed -> served by every broker (no restart) in {reached:.0f} s")
    assert renewed["certificates"]["clusterCaExpires"] > first_ca_expiry, "the cluster CA was not renewed"
    producer.wait_for("ACK", 30, since=since_renewal)  # still writing
    produced = producer.stop()

    bob_config = {"security.protocol": "SSL", "ssl.ca.location": "/bob/ca.crt",
                  "ssl.certificate.location": "/bob/user.crt", "ssl.key.location": "/bob/user.key"}
    consumer = Workload(sub, ns, "consumer.py", {"BOOTSTRAP": mtls, "TOPIC": TOPIC, "UNTIL_EMPTY": 10,
                                                 "CLIENT_CONFIG": json.dumps(bob_config)}, secrets={"bob": "/bob"})
    consumer.wait_for("REC ", 120)
    v = verdict(produced, consumer.stop())
    note(f"[kind] secured cluster, certificates renewed under load: {v.summary()}")
    assert v.acked > 1000 and v.ok, v.summary()
    assert brokers() == before, "brokers restarted for a certificate renewal"
