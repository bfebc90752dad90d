"""A locked-down three-broker cluster: brokers replicate over a mutual-TLS listener (their principal,
from their certificate, the only super user), clients use SASL_SSL with SCRAM and ACLs, brokers
reach the controller over https with a token. Under an acks=all load the leader is SIGKILLed: no
acknowledged record is lost, and replication over TLS brings the ISR back to three."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from chaos_tools import FAST_FAILURE, SequenceProducer, assert_nothing_lost, verify
from group_clients import wait_for
from harness import BrokerProcess, ControllerProcess, free_port
from measurements import note
from secure import Pki, add_scram_users
from secure_clients import Credentials, refused

pytestmark = pytest.mark.timeout(400)
TOKEN = "s3cret-controller-token"


class SecureCluster:
    def __init__(self, tmp: Path, brokers: int = 3) -> None:
        self.pki = Pki(tmp / "pki")
        server = self.pki.server("broker")  # CN=broker,O=dm, for 127.0.0.1: serves and authenticates
        controller_tls = {"listener.name.controller.ssl.keystore.location": server}
        self.controller = ControllerProcess(tmp / "controller", {**FAST_FAILURE, **controller_tls})
        self.controller_url = f"https://127.0.0.1:{self.controller.port}"
        self.internal = [free_port() for _ in range(brokers)]
        self.clients = [free_port() for _ in range(brokers)]
        self.brokers = []
        for i in range(brokers):
            overrides = {
                **FAST_FAILURE,
                "listeners": f"INTERNAL://127.0.0.1:{self.internal[i]},CLIENTS://127.0.0.1:{self.clients[i]}",
                "listener.security.protocol.map": "INTERNAL:SSL,CLIENTS:SASL_SSL",
                "inter.broker.listener.name": "INTERNAL",
                "ssl.keystore.location": server,
                "ssl.truststore.location": self.pki.ca_file,
                "listener.name.internal.ssl.client.auth": "required",
                "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/,DEFAULT",
                "listener.name.clients.sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": "User:broker;User:admin",
                "controller.token": TOKEN,
                "listener.name.controller.ssl.truststore.location": self.pki.ca_file,
            }
            broker = BrokerProcess(tmp / f"broker-{i}", overrides, node_id=i, controller_url=self.controller_url)
            broker.port = self.clients[i]
            self.brokers.append(broker)
        self.controller.overrides["controller.token"] = TOKEN

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.clients)

    def metadata(self) -> dict:
        import json
        import ssl
        import urllib.request

        ctx = ssl.create_default_context(cafile=str(self.pki.ca_file))
        req = urllib.request.Request(self.controller_url + "/v1/metadata?version=-1",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
            return json.loads(resp.read())

    def __enter__(self) -> SecureCluster:
        self.controller.start()
        for b in self.brokers:
            b.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for b in self.brokers:
            if b.alive():
                b.stop()
        self.controller.stop()


def scram(user: str, password: str, ca: Path) -> Credentials:
    return Credentials("SASL_SSL", ca=ca, mechanism="SCRAM-SHA-512", username=user, password=password)


def bootstrap_admin_user(cluster: SecureCluster) -> None:
    """The first SCRAM user, made over the inter-broker listener with the broker's own certificate
    (Kafka's equivalent: kafka-storage format --add-scram)."""
    import asyncio

    from dm_broker.protocol.build import make
    from dm_broker.protocol.client import KafkaConnection
    from dm_broker.protocol.codec import request_class
    from dm_broker.security import scram as scram_lib
    from dm_broker.security.client_security import ClientSecurity
    from dm_broker.security.tls import TlsSettings, client_context

    async def go() -> None:
        context = client_context(TlsSettings("test", keystore_location=str(cluster.pki.directory / "broker.pem"),
                                             truststore_location=str(cluster.pki.ca_file)))
        conn = await KafkaConnection.open("127.0.0.1", cluster.internal[0], security=ClientSecurity("SSL", context))
        salt = b"0123456789abcdef"
        cls = request_class(51, 0)
        upsert = make(sys_modules(cls).ScramCredentialUpsertion, name="admin", mechanism=2, iterations=4096, salt=salt,
                      salted_password=scram_lib.salted_password("SCRAM-SHA-512", "admin-pw", salt, 4096))
        resp = await conn.request(make(cls, deletions=(), upsertions=(upsert,)))
        assert resp.results[0].error_code == 0, resp
        await conn.close()

    asyncio.run(go())


def sys_modules(cls):  # the request's nested classes live in its module
    import sys

    return sys.modules[cls.__module__]


def test_a_locked_down_cluster_replicates_over_mtls_and_loses_nothing_when_a_leader_dies(tmp_path: Path):
    from confluent_kafka.admin import AclBinding, AdminClient, NewTopic

    with SecureCluster(tmp_path) as cluster:
        ca = cluster.pki.ca_file
        bootstrap_admin_user(cluster)
        admin_creds = scram("admin", "admin-pw", ca)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **admin_creds.librdkafka()})
        admin.create_topics([NewTopic("orders", 2, 3, config={"min.insync.replicas": "2"})])["orders"].result(30)
        add_scram_users(cluster.bootstrap, {"app": "app-pw"}, ("SCRAM-SHA-512",), admin_creds.librdkafka())
        for f in admin.create_acls([AclBinding("TOPIC", "orders", "LITERAL", "User:app", "*", op, "ALLOW")
                                    for op in ("WRITE", "READ")]
                                   + [AclBinding("GROUP", "unused", "LITERAL", "User:app", "*", "READ",
                                                 "ALLOW")]).values():
            f.result(15)
        app = scram("app", "app-pw", ca).librdkafka()
        # the refusals first: no client certificate on the inter-broker listener, a wrong password
        refused(f"127.0.0.1:{cluster.internal[1]}", Credentials("SSL", ca=ca))
        refused(cluster.bootstrap, scram("app", "wrong", ca))
        wait_for(lambda: all(len(p["isr"]) == 3 for p in cluster.metadata()["topics"]["orders"]["partitions"]),
                 timeout=60, what="the ISR of three, over mutual TLS")
        producer = SequenceProducer(cluster.bootstrap, "orders", 2, config=app)
        producer.start()
        try:
            wait_for(lambda: len(producer.acked) > 500, timeout=60, what="acknowledged writes")
            # the leader dies with two in-sync followers, one of which takes over
            wait_for(lambda: len(cluster.metadata()["topics"]["orders"]["partitions"][0]["isr"]) == 3,
                     timeout=60, what="orders-0's ISR of three under load")
            victim = cluster.metadata()["topics"]["orders"]["partitions"][0]["leader"]
            killed_at = time.monotonic()
            cluster.brokers[victim].kill()
            recovery = producer.first_ack_after(0, killed_at)
            time.sleep(1)
            cluster.brokers[victim].start()
            wait_for(lambda: all(len(p["isr"]) == 3 for p in cluster.metadata()["topics"]["orders"]["partitions"]),
                     timeout=90, what="the restarted broker back in every ISR, over mutual TLS")
            time.sleep(1)
        finally:
            producer.stop.set()
            producer.join(150)
        result = verify(cluster.bootstrap, "orders", producer, 2, config=app)
        note(f"[secure cluster: mTLS between brokers, SASL_SSL+SCRAM clients, ACLs, https controller] {result}, "
             f"leader SIGKILL -> next ack {recovery:.2f}s")
        assert_nothing_lost(result, producer)
