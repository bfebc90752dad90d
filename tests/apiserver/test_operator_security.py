"""A secured DMCluster on a real API server: the CAs and the brokers' certificate in Secrets, the
listeners in the brokers' configuration, Users' credentials and ACLs in the cluster's controller
(and out of it when the User goes), CA renewal with the same key; an idle pass writes nothing."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json

from cryptography import x509
from dm_operator.certificates import certificates_in
from dm_operator.runtime import ClusterRuntime
from dm_testbed.client import Testbed
from test_operator_runtime import create_cluster, register, settle, sts, with_runtime, writes

SECURED = {"replicas": 1,
           "listeners": [{"name": "plain", "port": 9092}, {"name": "tls", "port": 9093, "tls": True,
                                                               "authentication": "scram-sha-512"},
                         {"name": "mtls", "port": 9094, "tls": True, "authentication": "tls"}],
           "authorization": {"superUsers": ["User:ops"]}}


def secret(tb: Testbed, ns: str, name: str) -> dict[str, str]:
    data = tb.kubectl_json("get", "secret", name, "-n", ns)["data"]
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


def apply_user(tb: Testbed, ns: str, name: str, spec: dict) -> None:
    tb.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(
        {"apiVersion": "dm.dev/v1alpha1", "kind": "User", "metadata": {"name": name},
         "spec": {"cluster": "c", **spec}}))


def test_a_secured_cluster_gets_cas_certificates_and_listeners(apiserver: Testbed, namespace: str):
    uid = create_cluster(apiserver, namespace, SECURED)

    async def check(runtime: ClusterRuntime, tb: Testbed, ns: str) -> None:
        await runtime.reconcile()
        ca = secret(tb, ns, "c-cluster-ca")
        assert "BEGIN PRIVATE KEY" in ca["ca.key"]
        assert secret(tb, ns, "c-cluster-ca-cert")["ca.crt"] == ca["ca.crt"]
        assert "ca.key" not in secret(tb, ns, "c-clients-ca-cert")
        chain = certificates_in(secret(tb, ns, "c-broker-certs")["broker.pem"])
        sans = chain[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert f"*.c-brokers.{ns}.svc.cluster.local" in sans.get_values_for_type(x509.DNSName)
        assert chain[0].subject.rfc4514_string() == "CN=c-broker,O=dm.dev"
        properties = tb.kubectl_json("get", "configmap", "c-config", "-n", ns)["data"]["broker.properties"]
        assert "listeners=REPLICATION://0.0.0.0:9091,PLAIN://0.0.0.0:9092,TLS://0.0.0.0:9093,MTLS://0.0.0.0:9094" \
            in properties
        assert "super.users=User:CN=c-broker,O=dm.dev;User:ops" in properties
        pod = sts(tb, ns)["spec"]["template"]["spec"]
        args = pod["containers"][0]["args"]
        assert any(a.startswith("advertised.listeners=REPLICATION://$(POD_NAME).c-brokers") for a in args)
        assert "--port" not in args
        # the controller API over TLS, verified with the cluster CA for the name the operator answers with
        assert args[args.index("--controller") + 1].startswith("https://") and \
            args[args.index("--controller") + 1].endswith(f"/clusters/{ns}/c")
        assert "listener.name.controller.ssl.truststore.location=/etc/dm/cluster-ca/ca.crt" in args
        assert f"controller.tls.server.name=controller.c.{ns}.dm" in args
        mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        assert {"/etc/dm/certs", "/etc/dm/cluster-ca", "/etc/dm/clients-ca"} <= mounts
        ports = [p["port"] for p in tb.kubectl_json("get", "service", "c-brokers", "-n", ns)["spec"]["ports"]]
        assert ports == [9091, 9092, 9093, 9094]
        status = tb.kubectl_json("get", "dmcluster", "c", "-n", ns)["status"]
        assert [(li["name"], li["bootstrapServers"]) for li in status["listeners"]][1] == (
            "tls", f"c-bootstrap.{ns}.svc.cluster.local:9093")
        assert status["certificates"]["clusterCaExpires"]
        await settle(runtime, tb, ns)  # the StatefulSet's pod appears (the status counts it)
        before = writes()
        await runtime.reconcile()
        assert writes() == before, "an idle pass of a secured cluster writes nothing"

    with_runtime(apiserver, namespace, uid, check)


def test_users_get_credentials_and_acls_and_lose_them_when_deleted(apiserver: Testbed, namespace: str):
    uid = create_cluster(apiserver, namespace, SECURED)
    acl = {"resource": {"type": "topic", "name": "orders"}, "operations": ["Read", "Write"]}
    quotas = {"producerByteRate": 1048576, "requestPercentage": 50}
    apply_user(apiserver, namespace, "alice", {"authentication": {"type": "scram-sha-512"},
                                               "authorization": {"acls": [acl]}, "quotas": quotas})
    apply_user(apiserver, namespace, "bob", {"authentication": {"type": "tls"}, "authorization": {"acls": [
        {"resource": {"type": "group", "name": "bob-", "patternType": "prefix"}, "operations": ["Read"]}]}})

    async def check(runtime: ClusterRuntime, tb: Testbed, ns: str) -> None:
        from dm_broker.security.pki import KeyPair, signed_by
        from dm_broker.security.scram import verify_password

        await runtime.reconcile()
        user = tb.kubectl_json("get", "user", "alice", "-n", ns)
        assert [c["reason"] for c in user["status"]["conditions"]] == ["ControllerRefused"]  # no identity yet
        await register(runtime, 0)  # the cluster has an identity once a broker registers
        await runtime.reconcile()
        controller = runtime.controller
        alice = secret(tb, ns, "alice")
        assert verify_password(controller.cluster.scram["alice"]["SCRAM-SHA-512"], alice["password"])
        assert f'username="alice" password="{alice["password"]}"' in alice["sasl.jaas.config"]
        bob = secret(tb, ns, "bob")
        clients_ca = secret(tb, ns, "c-clients-ca")
        assert signed_by(KeyPair("", bob["user.crt"]), KeyPair(clients_ca["ca.key"], clients_ca["ca.crt"]))
        assert bob["ca.crt"] == secret(tb, ns, "c-cluster-ca-cert")["ca.crt"]
        principals = sorted({a.principal for a in controller.cluster.acls})
        assert principals == ["User:CN=bob", "User:alice"]
        user = tb.kubectl_json("get", "user", "alice", "-n", ns)
        assert user["status"]["principal"] == "User:alice" and user["status"]["acls"] == 2
        assert not user["metadata"].get("finalizers"), "no finalizer (ADR 0061)"
        assert [c["status"] for c in user["status"]["conditions"] if c["type"] == "Ready"] == ["True"]
        # the User's quotas are the cluster's quotas on its user entity
        assert [(q.entity, q.values) for q in controller.cluster.quotas] == [
            ({"user": "alice"}, {"producer_byte_rate": 1048576.0, "request_percentage": 50.0})]
        # an ACL and a quota removed from the spec leave the cluster, a new quota joins
        acl["operations"] = ["Read"]
        apply_user(tb, ns, "alice", {"authentication": {"type": "scram-sha-512"}, "authorization": {"acls": [acl]},
                                     "quotas": {"consumerByteRate": 2097152, "requestPercentage": 50}})
        runtime.cache.expire()
        await runtime.reconcile()
        assert sorted(a.operation.name for a in controller.cluster.acls if a.principal == "User:alice") == ["READ"]
        assert [q.values for q in controller.cluster.quotas] == [
            {"consumer_byte_rate": 2097152.0, "request_percentage": 50.0}]
        # the ACLs, quotas and credentials are persisted: a restarted operator has them
        state = tb.kubectl_json("get", "dmcluster", "c", "-n", ns)["status"]["controller"]
        assert len(state["acls"]) == 2
        assert state["clientQuotas"] == [{"entity": [{"type": "user", "name": "alice"}],
                                          "values": {"consumer_byte_rate": 2097152.0, "request_percentage": 50.0}}]
        reloaded = await runtime.controller.store.load_cluster()
        assert reloaded is not None and reloaded.quotas == controller.cluster.quotas
        # an invalid quota is refused by the schema before it reaches the operator
        bad = tb.kubectl("apply", "-n", ns, "-f", "-", check=False, input=json.dumps(
            {"apiVersion": "dm.dev/v1alpha1", "kind": "User", "metadata": {"name": "alice"},
             "spec": {"cluster": "c", "authentication": {"type": "scram-sha-512"},
                      "quotas": {"producerByteRate": 0}}}))
        assert bad.returncode != 0 and "producerByteRate" in bad.stderr
        assert "alice" in secret(tb, ns, "c-scram-credentials")["credentials.json"]
        # deleting the User takes its credential and ACLs out of the cluster
        tb.kubectl("delete", "user", "alice", "-n", ns, "--wait=false")
        runtime.cache.expire()
        await runtime.reconcile()
        assert "alice" not in controller.cluster.scram
        assert all(a.principal != "User:alice" for a in controller.cluster.acls)
        assert controller.cluster.quotas == []
        for _ in range(50):
            if not tb.kubectl_json("get", "user", "-n", ns)["items"][1:]:
                break
            await asyncio.sleep(0.1)
        assert [u["metadata"]["name"] for u in tb.kubectl_json("get", "user", "-n", ns)["items"]] == ["bob"]

    with_runtime(apiserver, namespace, uid, check)


def test_the_cas_are_renewed_with_the_same_key_and_the_brokers_certificate_follows(apiserver: Testbed,
                                                                                    namespace: str):
    uid = create_cluster(apiserver, namespace, {**SECURED, "clusterCa": {"validity": "60s", "renewBefore": "52s"}})

    async def check(runtime: ClusterRuntime, tb: Testbed, ns: str) -> None:
        await runtime.reconcile()
        first = secret(tb, ns, "c-cluster-ca")
        first_broker = certificates_in(secret(tb, ns, "c-broker-certs")["broker.pem"])[0]
        deadline = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=30)
        renewed = first
        while renewed["ca.crt"] == first["ca.crt"] and datetime.datetime.now(datetime.UTC) < deadline:
            await asyncio.sleep(1)
            runtime.cache.expire()
            await runtime.reconcile()
            renewed = secret(tb, ns, "c-cluster-ca")
        assert renewed["ca.crt"] != first["ca.crt"], "the CA was not renewed"
        assert renewed["ca.key"] == first["ca.key"]
        bundle = certificates_in(secret(tb, ns, "c-cluster-ca-cert")["ca.crt"])
        assert len(bundle) == 2  # the renewed certificate, and the old one until it expires
        broker = certificates_in(secret(tb, ns, "c-broker-certs")["broker.pem"])[0]
        assert broker.serial_number != first_broker.serial_number
        await runtime.recorder.flush()
        reasons = [e["reason"] for e in tb.kubectl_json("get", "events", "-n", ns)["items"]]
        assert "CertificateAuthorityRenewed" in reasons and "CertificateRenewed" in reasons

    with_runtime(apiserver, namespace, uid, check)


def test_a_spec_the_schema_cannot_refuse_is_reported_and_changes_nothing(apiserver: Testbed, namespace: str):
    uid = create_cluster(apiserver, namespace, SECURED)

    async def check(runtime: ClusterRuntime, tb: Testbed, ns: str) -> None:
        await runtime.reconcile()
        before = sts(tb, ns)["metadata"]["resourceVersion"]
        clash = {**SECURED, "listeners": [{"name": "plain", "port": 9092}, {"name": "tls", "port": 9092, "tls": True}],
                 "clusterCa": {"validity": "1h", "renewBefore": "2h"},
                 "template": {"affinity": {"nodeAfinity": {}},
                              "tolerations": [{"key": "x", "tolerationSeconds": "30"}]}}
        tb.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(
            {"apiVersion": "dm.dev/v1alpha1", "kind": "DMCluster", "metadata": {"name": "c"},
             "spec": {"storage": {"size": "1Gi"}, **clash}}))
        runtime.cache.expire()
        await runtime.reconcile()  # no exception: a condition and an Event
        obj = tb.kubectl_json("get", "dmcluster", "c", "-n", ns)
        conditions = {c["type"]: c for c in obj["status"]["conditions"]}
        assert conditions["Ready"]["reason"] == "InvalidSpec"
        assert conditions["SpecValid"]["status"] == "False"
        assert "listener ports must differ" in conditions["SpecValid"]["message"]
        assert "renewBefore (2h) must be shorter than validity (1h)" in conditions["SpecValid"]["message"]
        # the pod template's preserved objects, which the API server took as they were
        assert "template.affinity: nodeAfinity: unknown field" in conditions["SpecValid"]["message"]
        assert "template.tolerations: [0].tolerationSeconds: Input should be a valid integer" in \
            conditions["SpecValid"]["message"]
        assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
        assert sts(tb, ns)["metadata"]["resourceVersion"] == before, "an invalid spec changed the brokers"
        await runtime.recorder.flush()
        assert "InvalidSpec" in [e["reason"] for e in tb.kubectl_json("get", "events", "-n", ns)["items"]]
        tb.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(
            {"apiVersion": "dm.dev/v1alpha1", "kind": "DMCluster", "metadata": {"name": "c"},
             "spec": {"storage": {"size": "1Gi"}, **SECURED}}))
        runtime.cache.expire()
        await runtime.reconcile()
        conditions = {c["type"]: c for c in tb.kubectl_json("get", "dmcluster", "c", "-n", ns)["status"]["conditions"]}
        assert conditions["SpecValid"]["status"] == "True"

    with_runtime(apiserver, namespace, uid, check)
