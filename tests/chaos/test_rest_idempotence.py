"""The REST Proxy's produce is idempotent across its own retries (issue 65). A record acknowledged once over
the REST Proxy was read back twice after a leader pod was deleted (e2e test_http.py under load): the REST Proxy
asked the new leader again for a batch the old one had appended. It now writes as an idempotent producer: a
batch asked again carries its producer id and sequence, and the leader that has it answers with its offset."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import requests
from clients import ConfluentClient
from harness import Cluster, free_port

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def cluster(tmp_path: Path):
    cluster = Cluster(tmp_path, brokers=3, proxied=True)
    rest_ports = []
    for broker in cluster.brokers:
        rest_ports.append(free_port())
        broker.overrides["http.listeners"] = f"HTTP://127.0.0.1:{rest_ports[-1]}"
    cluster.start()
    cluster.rest_ports = rest_ports
    yield cluster
    cluster.stop()


def test_a_produce_whose_answer_was_lost_is_asked_again_and_written_once(cluster):
    """The leader appends the REST Proxy's batch, and its answer is lost on the way (the connection drops right
    after it): before, the records were answered as failed (a client sending them again wrote them twice); now
    the REST Proxy asks again with the same producer id and sequence, the leader answers with the offsets it
    gave them, and each record is there once."""
    client = ConfluentClient(cluster.bootstrap)
    client.create_topic("rest-once", 1, {"min.insync.replicas": "2"}, replication_factor=3)
    leader = cluster.leader("rest-once", 0)
    via = next(i for i in range(3) if i != leader)  # the REST Proxy forwards the Produce to the leader
    url = f"http://127.0.0.1:{cluster.rest_ports[via]}/topics/rest-once"
    headers = {"Content-Type": "application/vnd.kafka.binary.v2+json"}
    body = {"records": [{"value": base64.b64encode(b"first").decode()}]}
    assert requests.post(url, data=json.dumps(body), headers=headers, timeout=60).status_code == 200
    values = [f"v{i}".encode() for i in range(20)]
    cluster.proxies[leader].drop_responses(0)  # the leader's next Produce answer never arrives
    body = {"records": [{"value": base64.b64encode(v).decode()} for v in values]}
    answer = requests.post(url, data=json.dumps(body), headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    assert cluster.proxies[leader].dropped == 1, "the answer was not dropped"
    offsets = answer.json()["offsets"]
    assert [o["error_code"] for o in offsets] == [None] * 20, offsets
    assert [o["offset"] for o in offsets] == list(range(1, 21))
    got = [g.value for g in client.consume("rest-once", 1000, timeout=60, to_end=True)]  # all there is
    assert got == [b"first", *values], got
