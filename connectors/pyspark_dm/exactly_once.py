"""deliveryGuarantee=exactly-once: one Kafka transaction per task, committed with Spark's commit.

Tasks (executors) write their rows in a transaction under the id `<prefix>-<partition id>`
and leave it open: the producer id and epoch go back to the driver in the commit message. A
retried task attempt uses the same id, so its producer fences the failed attempt and aborts what
it wrote. The driver's commit records the decision in the commit log, ends every transaction with
EndTxn, records "done", then aborts transactions of the prefix that no batch claims (attempts of
a run that died). A batch Spark replays after a crash is recognised by the log and its new
transactions aborted; one decided but not finished is finished before anything else is written.
See docs/adr/0020-spark-exactly-once.md for why this is sound and where it is not.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from .commit_log import CommitLog, Decision
from .errors import DmSourceError
from .options import WriteOptions
from .txn_client import TxnClient, TxnHandle
from .wire import DmClient

log = logging.getLogger("pyspark_dm")
STATS_INTERVAL_MS = "50"
SLOW_INIT_S = 5.0


# -- executor side -----------------------------------------------------------------------------


def transactional_id(opts: WriteOptions, partition: int) -> str:
    return f"{opts.transactional_id_prefix}-{partition}"


def open_transaction(opts: WriteOptions, partition: int) -> tuple[Any, TxnHandle]:
    """A producer with a transaction begun, and that transaction's handle. The producer id and
    epoch come from librdkafka's statistics (its `eos` section): the Python client has no other
    way to tell them."""
    from confluent_kafka import KafkaException, Producer

    stats = [""]  # the latest statistics only: they come every STATS_INTERVAL_MS
    tid = transactional_id(opts, partition)
    config = {"linger.ms": "5", "compression.type": "lz4", "log_level": "4",
              "transaction.timeout.ms": str(opts.transaction_timeout_ms), **opts.client_config,
              "bootstrap.servers": opts.bootstrap, "transactional.id": tid, "enable.idempotence": "true",
              "acks": "all", "statistics.interval.ms": STATS_INTERVAL_MS,
              "stats_cb": lambda text: stats.__setitem__(0, text)}
    started = time.monotonic()
    try:
        producer = Producer(config)
        producer.init_transactions(opts.timeout_s)
    except KafkaException as exc:
        raise DmSourceError(f"starting the transaction of {tid!r}: {exc}") from None
    if (took := time.monotonic() - started) > SLOW_INIT_S:
        # InitProducerId waits for the coordinator to abort what the id had open: worth a line when slow
        log.warning("exactly-once sink: the producer of %r took %.1f s to start its transactions", tid, took)
    deadline = time.monotonic() + opts.timeout_s
    while True:
        producer.poll(0.05)
        eos = json.loads(stats[0]).get("eos", {}) if stats[0] else {}
        if eos.get("idemp_state") == "Assigned" and eos.get("producer_id", -1) >= 0:
            break
        if time.monotonic() > deadline:
            raise DmSourceError(f"the producer of {tid!r} reported no producer id in {opts.timeout_s:.0f} s")
    producer.begin_transaction()
    return producer, TxnHandle(tid, int(eos["producer_id"]), int(eos["producer_epoch"]))


def task_identity() -> tuple[str, int, int]:
    """(query, batch, partition id) of the running task: the streaming query's id and micro-batch
    come from the local properties Spark sets on every task of a micro-batch."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise DmSourceError("exactly-once writes run in Spark tasks only")
    query = ctx.getLocalProperty("sql.streaming.queryId") or ""
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    return query, int(batch) if batch is not None else 0, ctx.partitionId()


# -- driver side -------------------------------------------------------------------------------


class Committer:
    """What the driver does with a batch's transactions."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.prefix = opts.transactional_id_prefix or ""
        config = {k: v for k, v in opts.client_config.items() if not k.startswith("transaction")}
        self.log = CommitLog(opts.bootstrap, opts.commit_log_topic, opts.timeout_s, config)

    def _client(self) -> DmClient:
        return DmClient(self.opts.bootstrap, timeout=self.opts.timeout_s, client_config=self.opts.client_config)

    def recover(self) -> None:
        """Before anything is written: finishes a batch that was decided but not finished when
        the last driver stopped (its transactions are still open; a task of the replay would
        otherwise abort them by taking their transactional ids)."""
        self.log.ensure_topic()
        last = self.log.latest(self.prefix)
        if last is not None and last.state == "decided":
            log.warning("exactly-once sink %s: finishing batch %d of the previous run", self.prefix, last.batch)
            state, lost = self._finish(last)
            if state == "torn":
                raise self._torn(last, lost)
            if state == "abandoned":
                log.warning("exactly-once sink %s: batch %d had been aborted by the coordinator; Spark's replay "
                            "writes it again", self.prefix, last.batch)

    def commit(self, query: str, batch: int, handles: list[TxnHandle]) -> None:
        last = self.log.latest(self.prefix)
        if last is not None and last.state == "decided":
            self.recover()
            last = self.log.latest(self.prefix)
        if last is not None and last.query == query and last.batch == batch and last.state in ("done", "torn"):
            # Spark replays a batch it could not record as committed: its data is already in.
            log.warning("exactly-once sink %s: batch %d was committed by an earlier run; the replay's "
                        "transactions are aborted", self.prefix, batch)
            self.abort(handles)
            return
        decision = Decision(prefix=self.prefix, query=query, batch=batch, state="decided",
                            transactions=[(h.transactional_id, h.producer_id, h.epoch) for h in handles])
        self.log.append(decision)
        state, lost = self._finish(decision)
        if state == "abandoned":
            raise DmSourceError(
                f"batch {batch}: the transaction coordinator aborted its transactions before they were committed "
                f"(did the batch take longer than kafka.transaction.timeout.ms={self.opts.transaction_timeout_ms}?); "
                "nothing of the batch is visible, and the query's restart writes it again")
        if state == "torn":
            raise self._torn(decision, lost)
        self._abort_strays({h.transactional_id for h in handles})

    def _finish(self, decision: Decision) -> tuple[str, list[str]]:
        """Commits the decision's transactions; records and returns how that went (done,
        abandoned: none could be, torn: some could not) and the ids that could not."""
        with self._client() as client:
            txns = TxnClient(client)
            outcome = {h: txns.end(h, commit=True) for h in decision.handles()}
        lost = [h.transactional_id for h, ok in outcome.items() if not ok]
        state = "done" if not lost else "abandoned" if len(lost) == len(outcome) else "torn"
        self.log.append(decision.moved_to(state))
        return state, lost

    def _torn(self, decision: Decision, lost: list[str]) -> DmSourceError:
        return DmSourceError(
            f"batch {decision.batch}: the transactions of {', '.join(lost)} were aborted by the coordinator before "
            f"they could be committed while the others were (kafka.transaction.timeout.ms="
            f"{self.opts.transaction_timeout_ms} passed before the driver came back?): those tasks' rows are lost, "
            "and the batch is not written again. Raise kafka.transaction.timeout.ms above the longest outage")

    def abort(self, handles: list[TxnHandle]) -> None:
        if not handles:
            return
        with self._client() as client:
            txns = TxnClient(client)
            for h in handles:
                txns.end(h, commit=False)

    def _abort_strays(self, keep: set[str]) -> None:
        """Open transactions of this prefix that no batch claims belong to attempts of a run that
        died: they would hold read_committed consumers back until their timeout."""
        with self._client() as client:
            txns = TxnClient(client)
            for tid in txns.open_transactions(self.prefix + "-"):
                if tid not in keep and tid.removeprefix(self.prefix + "-").isdigit():
                    log.info("exactly-once sink %s: aborting stray transaction %s", self.prefix, tid)
                    txns.fence(tid, self.opts.transaction_timeout_ms)
