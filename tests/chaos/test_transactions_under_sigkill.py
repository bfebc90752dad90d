"""Transactions under failure (3 brokers, RF=3, min.insync.replicas=2): a confluent-kafka transactional
producer commits and aborts transactions of 20 records spread over 3 partitions while the broker that
coordinates its transactional id, and then the leaders of its partitions, are SIGKILLed and restarted
mid-transaction. Invariants, read back with read_committed: every committed transaction is visible
exactly once and whole, every aborted one not at all, one whose outcome the client could not learn is
all or nothing; nothing is left hanging (the last stable offset reaches the high watermark)."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from chaos_tools import FAST_FAILURE, create_topic, fully_replicated
from clients import no_open_transactions
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from dm_broker.partitioners import murmur2_partition
from group_clients import wait_for
from harness import Cluster
from measurements import note

pytestmark = pytest.mark.timeout(600)
TXN_ID = "chaos-txn"
RECORDS = 20
PARTITIONS = 3


class TxnLoad(threading.Thread):
    """Transactions one after another; every fourth is aborted on purpose. Outcomes: committed (the
    commit returned), aborted (the abort returned), unknown (the producer failed for good mid-commit:
    a new instance takes over, which fences the old one and aborts whatever it left open)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.outcomes: dict[int, str] = {}
        self.stop_flag = threading.Event()
        self.errors: list[str] = []

    def producer(self) -> Producer:
        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": TXN_ID,
                      "transaction.timeout.ms": 20_000, "message.timeout.ms": 20_000, "retry.backoff.ms": 50,
                      "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500})
        p.init_transactions(60)
        return p

    def run(self) -> None:
        p = self.producer()
        n = 0
        while not self.stop_flag.is_set():
            commit = n % 4 != 3
            self.outcomes[n] = "unknown"
            try:
                p.begin_transaction()
                for i in range(RECORDS):
                    p.produce(self.topic, value=f"{n}:{i}".encode(), partition=i % PARTITIONS)
                if commit:
                    self._retry(p.commit_transaction, 30)
                    self.outcomes[n] = "committed"
                else:
                    self._retry(p.abort_transaction, 30)
                    self.outcomes[n] = "aborted"
            except KafkaException as exc:
                error = exc.args[0]
                self.errors.append(f"{n}: {error}")
                if error.txn_requires_abort():
                    try:
                        self._retry(p.abort_transaction, 30)
                        self.outcomes[n] = "aborted"
                    except KafkaException as again:
                        self.errors.append(f"{n}: abort: {again.args[0]}")
                        p = self._replace(p)
                else:
                    p = self._replace(p)
            n += 1

    @staticmethod
    def _retry(call, timeout: float) -> None:
        for _ in range(20):
            try:
                call(timeout)
                return
            except KafkaException as exc:
                if not exc.args[0].retriable():
                    raise
                time.sleep(0.2)
        call(timeout)

    def _replace(self, old: Producer) -> Producer:
        while True:
            try:
                return self.producer()  # fences the old instance: its open transaction is aborted
            except KafkaException as exc:
                self.errors.append(f"init: {exc.args[0]}")
                time.sleep(0.5)


def coordinator_of(cluster: Cluster) -> int:
    partitions = cluster.metadata()["topics"]["__transaction_state"]["partitions"]
    return partitions[murmur2_partition(TXN_ID.encode(), len(partitions))]["leader"]


def read_committed(bootstrap: str, topic: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"v-{uuid.uuid4().hex[:6]}",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got, last = [], time.monotonic()
    while time.monotonic() - last < 4:
        m = c.poll(0.2)
        if m is not None and not m.error():
            got.append((m.partition(), m.value()))
            last = time.monotonic()
    c.close()
    return got


def test_transactions_survive_sigkilled_coordinators_and_leaders(tmp_path: Path):
    with Cluster(tmp_path, 3, {**FAST_FAILURE, "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000}
                 ) as cluster:
        create_topic(cluster, "txn", PARTITIONS)
        load = TxnLoad(cluster.bootstrap, "txn")
        load.start()
        wait_for(lambda: sum(o == "committed" for o in load.outcomes.values()) >= 5, timeout=60,
                 what="the first transactions")
        victims = []
        for round_ in range(6):
            victim = coordinator_of(cluster) if round_ % 2 == 0 else cluster.leader("txn", round_ % PARTITIONS)
            victims.append(victim)
            cluster.brokers[victim].kill()
            time.sleep(3)
            cluster.brokers[victim].start()
            wait_for(lambda: fully_replicated(cluster, "txn", PARTITIONS), timeout=60, what="the ISR back to 3")
            done = len(load.outcomes)
            wait_for(lambda d=done: len(load.outcomes) > d + 3, timeout=60, what="transactions going on")
        load.stop_flag.set()
        load.join(120)
        assert not load.is_alive()
        wait_for(lambda: no_open_transactions(cluster.bootstrap, "txn", PARTITIONS), timeout=60,
                 what="no transaction left hanging")
        rows = read_committed(cluster.bootstrap, "txn")

    counts = Counter(value for _, value in rows)
    assert not [v for v, c in counts.items() if c > 1], "a record seen twice"
    seen: dict[int, set[int]] = {}
    for _, value in rows:
        n, i = map(int, value.decode().split(":"))
        seen.setdefault(n, set()).add(i)
    outcomes = load.outcomes
    torn = {n: sorted(s) for n, s in seen.items() if len(s) != RECORDS}
    # What the client knew of each torn one, and what it went through (to tell a lost commit from a
    # zombie write when this fails: it did once in about six runs, see docs/testing.md).
    assert not torn, (f"transactions visible in part: {torn}; outcomes {[(n, outcomes.get(n)) for n in torn]}; "
                      f"client errors {load.errors[-20:]}; brokers killed {victims}")
    assert not [n for n in seen if outcomes.get(n) == "aborted"], "an aborted transaction is visible"
    missing = [n for n, o in outcomes.items() if o == "committed" and n not in seen]
    assert not missing, f"committed transactions not visible: {missing}"
    for p in range(PARTITIONS):  # in order within a partition
        order = [tuple(map(int, v.decode().split(":"))) for part, v in rows if part == p]
        assert order == sorted(order), f"partition {p} out of order"
    summary = Counter(outcomes.values())
    note(f"[transactions under SIGKILL] {len(outcomes)} transactions: {dict(summary)}; {len(seen)} visible; "
          f"brokers killed: {victims}; client errors: {len(load.errors)}")
    assert summary["committed"] >= 10
