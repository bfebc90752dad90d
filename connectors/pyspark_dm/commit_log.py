"""The exactly-once sink's decisions, kept in a compacted dm topic.

Before the driver ends a batch's transactions it records "batch N of query Q commits these
transactions" (acks=all); after, "done". The record is what makes a batch's several
transactions commit together: a driver that dies between the two finds "decided" when it starts
again and finishes the commits (roll forward), and a replay of batch N that Spark runs because its
own commit log never got N is recognised and not written twice. One record key per
transactional id prefix: compaction keeps the latest, the only one that matters, since Spark
commits batches in order.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from dm_broker.log.records import decode_records, iter_batches
from dm_broker.security.client_config import security_only
from kio.schema.errors import ErrorCode
from pydantic import BaseModel

from .errors import DmSourceError
from .txn_client import TxnHandle
from .wire import DmClient

# decided: the commits are under way; done: all committed; abandoned: none committed (the
# coordinator aborted them first), a replay writes the batch again; torn: some committed, some
# lost, reported once and then treated as done.
State = Literal["decided", "done", "abandoned", "torn"]
LOG_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.ms": "600000", "segment.bytes": str(1 << 20),
                     "min.compaction.lag.ms": "0"}


class Decision(BaseModel):
    prefix: str
    query: str
    batch: int
    state: State
    transactions: list[tuple[str, int, int]] = []  # (transactional id, producer id, epoch)

    def handles(self) -> list[TxnHandle]:
        return [TxnHandle(*t) for t in self.transactions]

    def moved_to(self, state: State) -> Decision:
        return self.model_copy(update={"state": state})


class CommitLog:
    def __init__(self, bootstrap: str, topic: str, timeout_s: float, client_config: dict[str, str]) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.timeout_s = timeout_s
        self.client_config = client_config

    def ensure_topic(self) -> None:
        """Creates the log topic (compacted, one partition, replicated like the cluster allows)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({**security_only(self.client_config), "bootstrap.servers": self.bootstrap})
        meta = admin.list_topics(timeout=self.timeout_s)
        if self.topic in meta.topics and meta.topics[self.topic].error is None:
            return
        replicas = min(3, len(meta.brokers))
        future = admin.create_topics([NewTopic(self.topic, 1, replicas, config=LOG_TOPIC_CONFIGS)])[self.topic]
        try:
            future.result(self.timeout_s)
        except KafkaException as exc:
            if exc.args[0].code() != ErrorCode.topic_already_exists.value:
                raise DmSourceError(f"creating the exactly-once commit log topic {self.topic!r}: {exc}") from None

    def latest(self, prefix: str) -> Decision | None:
        """The last decision recorded for `prefix`, read from the start of the log to its end."""
        latest: Decision | None = None
        key = prefix.encode()
        with DmClient(self.bootstrap, timeout=self.timeout_s, client_config=self.client_config) as client:
            if self.topic not in client.metadata([self.topic]).topics:
                return None
            end = client.list_offsets({(self.topic, 0): -1})[(self.topic, 0)]
            pos = client.list_offsets({(self.topic, 0): -2})[(self.topic, 0)]
            while pos < end:
                res = client.fetch(self.topic, 0, pos, 1 << 20)
                if res.error != ErrorCode.none:
                    raise DmSourceError(f"reading the exactly-once commit log {self.topic!r}: {res.error.name}")
                moved = pos
                for start, header in iter_batches(res.records):
                    moved = header.next_offset
                    if header.is_control or header.last_offset < pos:
                        continue
                    batch = bytes(memoryview(res.records)[start: start + header.size])
                    for record in decode_records(batch):
                        if record.key == key and record.value is not None:
                            latest = Decision.model_validate_json(record.value)
                if moved == pos:
                    raise DmSourceError(f"the exactly-once commit log {self.topic!r} has nothing at offset {pos} "
                                        f"although it ends at {end}")
                pos = moved
        return latest

    def append(self, decision: Decision) -> None:
        """Writes `decision` and returns once the in-sync replicas have it."""
        from confluent_kafka import Producer

        producer = Producer({"log_level": "4", **self.client_config, "bootstrap.servers": self.bootstrap,
                             "enable.idempotence": "true", "acks": "all"})
        errors: list[Any] = []
        producer.produce(self.topic, json.dumps(decision.model_dump()).encode(), key=decision.prefix.encode(),
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
        left = producer.flush(self.timeout_s)
        if errors or left:
            raise DmSourceError(f"recording batch {decision.batch} as {decision.state} in {self.topic!r} failed: "
                                f"{errors[0] if errors else 'timed out'}")
