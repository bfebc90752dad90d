"""Transactions, pure parts: the coordinator's state transitions, the records of __transaction_state
and of markers, and a partition's producer state and aborted-transaction index (on real files)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dm_broker.config import BrokerConfig, TopicSettings
from dm_broker.log.partition_log import PartitionLog
from dm_broker.log.producer_state import InvalidProducerEpochError, InvalidTxnStateError, ProducerStateManager
from dm_broker.log.records import (
    TRANSACTIONAL_BIT,
    build_batch,
    build_marker_batch,
    control_marker,
    parse_header,
    validate_batches,
)
from dm_broker.txn import metadata as txn
from dm_broker.txn.metadata import TxnError, TxnMetadata
from dm_broker.txn.records import TxnLogValue, TxnState, decode_key, decode_value, encode_key, encode_value
from kio.schema.errors import ErrorCode as E

# -- the coordinator's transitions -------------------------------------------------------------------


def fresh(pid: int = 7) -> TxnMetadata:
    return TxnMetadata("t", pid, txn.NO_EPOCH, 60_000, TxnState.EMPTY)


def test_a_new_id_gets_epoch_zero_and_every_init_bumps_it():
    meta = txn.prepare_init(fresh(), 30_000, None, now=1, new_producer_id=None)
    assert (meta.producer_id, meta.producer_epoch, meta.state, meta.timeout_ms) == (7, 0, TxnState.EMPTY, 30_000)
    again = txn.prepare_init(meta, 30_000, None, now=2, new_producer_id=None)
    # A new instance names no epoch: nothing of the old one's can pass for a retry afterwards.
    assert again.producer_epoch == 1 and again.last_producer_epoch == txn.NO_EPOCH


def test_init_during_an_open_transaction_aborts_it_with_a_bumped_epoch():
    meta = txn.prepare_add(txn.prepare_init(fresh(), 30_000, None, 1, None), 7, 0, {("a", 0)}, now=2)
    assert meta.state == TxnState.ONGOING
    fenced = txn.prepare_init(meta, 30_000, None, 3, None)
    assert fenced.state == TxnState.PREPARE_ABORT and fenced.producer_epoch == 1 and fenced.fenced
    with pytest.raises(TxnError) as refused:  # the old instance's next step
        txn.prepare_add(fenced, 7, 0, {("a", 1)}, now=4)
    assert refused.value.code == E.producer_fenced


def test_init_naming_a_stale_epoch_during_an_open_transaction_is_fenced_and_changes_nothing():
    """A zombie of a fenced producer (its old epoch) recovering with InitProducerId (KIP-360) aborted the
    transaction its successor had open and bumped the epoch (issue 65); it is PRODUCER_FENCED, nothing changes.
    The current producer naming its own epoch still has its transaction aborted and its epoch bumped."""
    first = txn.prepare_init(fresh(), 30_000, None, 1, None)
    successor = txn.prepare_init(first, 30_000, None, 2, None)  # a new instance: epoch 1, the old one has 0
    meta = txn.prepare_add(successor, 7, 1, {("a", 0)}, now=3)
    with pytest.raises(TxnError) as refused:
        txn.prepare_init(meta, 30_000, (7, 0), 4, None)
    assert refused.value.code == E.producer_fenced
    assert meta.state == TxnState.ONGOING and meta.producer_epoch == 1
    own = txn.prepare_init(meta, 30_000, (7, 1), 5, None)
    assert own.state == TxnState.PREPARE_ABORT and own.producer_epoch == 2


def test_an_exhausted_epoch_moves_to_a_new_producer_id():
    meta = fresh()
    meta.producer_epoch = txn.MAX_EPOCH - 1
    rotated = txn.prepare_init(meta, 30_000, None, 1, new_producer_id=99)
    assert (rotated.producer_id, rotated.producer_epoch, rotated.previous_producer_id) == (99, 0, 7)


def test_kip_360_an_unknown_producer_is_fenced():
    meta = txn.prepare_init(fresh(), 30_000, None, 1, None)
    with pytest.raises(TxnError) as refused:
        txn.prepare_init(meta, 30_000, (123, 0), 2, None)
    assert refused.value.code == E.producer_fenced
    assert txn.prepare_init(meta, 30_000, (7, 0), 2, None).producer_epoch == 1


def test_kip_360_a_retried_bump_is_answered_with_the_epoch_it_bumped_to():
    """A producer names its epoch to have it bumped; when the answer is lost and it asks again naming the same
    epoch, it gets the bumped epoch again instead of being fenced (Kafka's prepareIncrementProducerEpoch)."""
    meta = txn.prepare_init(fresh(), 30_000, None, 1, None)
    bumped = txn.prepare_init(meta, 30_000, (7, 0), 2, None)
    assert (bumped.producer_epoch, bumped.last_producer_epoch) == (1, 0)
    for now in (3, 4):
        retried = txn.prepare_init(bumped, 30_000, (7, 0), now, None)
        assert (retried.producer_id, retried.producer_epoch, retried.state) == (7, 1, TxnState.EMPTY)
    again = txn.prepare_init(bumped, 30_000, (7, 1), 5, None)
    assert (again.producer_epoch, again.last_producer_epoch) == (2, 1)
    with pytest.raises(TxnError) as refused:  # two bumps back: another producer's epoch since
        txn.prepare_init(again, 30_000, (7, 0), 6, None)
    assert refused.value.code == E.producer_fenced
    replaced = txn.prepare_init(again, 30_000, None, 7, None)  # a new instance
    with pytest.raises(TxnError) as refused:
        txn.prepare_init(replaced, 30_000, (7, 2), 8, None)
    assert refused.value.code == E.producer_fenced


@pytest.mark.parametrize("how", ["new instance", "timeout"])
def test_a_fenced_producer_cannot_pass_for_a_retry(how):
    meta = txn.prepare_add(txn.prepare_init(fresh(), 1_000, None, 0, None), 7, 0, {("a", 0)}, now=10)
    fenced = txn.prepare_init(meta, 30_000, None, 20, None) if how == "new instance" else \
        txn.prepare_timeout_abort(meta, now=1_011)
    assert fenced.state == TxnState.PREPARE_ABORT and fenced.last_producer_epoch == txn.NO_EPOCH
    aborted = txn.complete(fenced, now=1_020)
    with pytest.raises(TxnError) as refused:  # the fenced producer's KIP-360 recovery
        txn.prepare_init(aborted, 30_000, (7, 0), 1_030, None)
    assert refused.value.code == E.producer_fenced


def test_end_commit_then_a_retry_is_answered_as_then():
    meta = txn.prepare_add(txn.prepare_init(fresh(), 30_000, None, 1, None), 7, 0, {("a", 0)}, now=2)
    prepared = txn.prepare_end(meta, 7, 0, commit=True, now=3, client_version=0)
    assert prepared.state == TxnState.PREPARE_COMMIT and prepared.producer_epoch == 0
    with pytest.raises(TxnError) as busy:  # markers not written yet
        txn.prepare_end(prepared, 7, 0, commit=True, now=4, client_version=0)
    assert busy.value.code == E.concurrent_transactions
    done = txn.complete(prepared, now=5)
    assert done.state == TxnState.COMPLETE_COMMIT and not done.partitions
    assert txn.prepare_end(done, 7, 0, commit=True, now=6, client_version=0) is None
    with pytest.raises(TxnError) as wrong:
        txn.prepare_end(done, 7, 0, commit=False, now=6, client_version=0)
    assert wrong.value.code == E.invalid_txn_state


def test_transaction_version_2_bumps_the_epoch_at_every_end():
    meta = txn.prepare_add(txn.prepare_init(fresh(), 30_000, None, 1, None), 7, 0, {("a", 0)}, now=2,
                           client_version=txn.TV2)
    prepared = txn.prepare_end(meta, 7, 0, commit=True, now=3, client_version=txn.TV2)
    assert prepared.producer_epoch == 1 and prepared.last_producer_epoch == 0
    assert txn.end_result(prepared) == (7, 1)
    done = txn.complete(prepared, now=4)
    assert txn.prepare_end(done, 7, 0, commit=True, now=5, client_version=txn.TV2) is None  # retried EndTxn
    with pytest.raises(TxnError):  # the old epoch cannot start the next transaction
        txn.prepare_add(done, 7, 0, {("a", 0)}, now=6, client_version=txn.TV2)
    assert txn.prepare_add(done, 7, 1, {("a", 0)}, now=6, client_version=txn.TV2).state == TxnState.ONGOING


def test_end_without_a_transaction_and_with_the_wrong_producer():
    meta = txn.prepare_init(fresh(), 30_000, None, 1, None)
    with pytest.raises(TxnError) as empty:
        txn.prepare_end(meta, 7, 0, commit=True, now=2, client_version=0)
    assert empty.value.code == E.invalid_txn_state
    with pytest.raises(TxnError) as mapping:
        txn.prepare_end(meta, 8, 0, commit=True, now=2, client_version=0)
    assert mapping.value.code == E.invalid_producer_id_mapping
    with pytest.raises(TxnError) as none:
        txn.prepare_end(None, 7, 0, commit=True, now=2, client_version=0)
    assert none.value.code == E.invalid_producer_id_mapping


def test_verification_answers():
    meta = txn.prepare_add(txn.prepare_init(fresh(), 30_000, None, 1, None), 7, 0, {("a", 0)}, now=2)
    assert txn.verify(meta, 7, 0, ("a", 0)) == E.none
    assert txn.verify(meta, 7, 0, ("a", 1)) == E.transaction_abortable
    assert txn.verify(meta, 7, 1, ("a", 0)) == E.invalid_producer_epoch or txn.verify(meta, 7, 1, ("a", 0)) \
        == E.producer_fenced
    assert txn.verify(txn.complete(txn.prepare_end(meta, 7, 0, True, 3, 0), 4), 7, 0, ("a", 0)) \
        == E.transaction_abortable


def test_a_timed_out_transaction_is_aborted_with_a_bumped_epoch():
    meta = txn.prepare_add(txn.prepare_init(fresh(), 1_000, None, 0, None), 7, 0, {("a", 0)}, now=10)
    assert txn.prepare_timeout_abort(meta, now=500) is None
    aborted = txn.prepare_timeout_abort(meta, now=1_011)
    assert aborted.state == TxnState.PREPARE_ABORT and aborted.producer_epoch == 1


# -- records ------------------------------------------------------------------------------------------


def test_transaction_log_records_round_trip():
    value = TxnLogValue(5, 3, 60_000, TxnState.ONGOING, {"a": [0, 2], "b": [1]}, 111, 100,
                        previous_producer_id=4, next_producer_id=-1, client_version=2)
    back = decode_value(encode_value(value))
    assert back == value
    assert decode_key(encode_key("my-txn")) == "my-txn"


def test_markers_are_control_batches():
    batch = build_marker_batch(9, 2, committed=False, coordinator_epoch=4, timestamp_ms=1)
    header = parse_header(batch)
    assert header.is_control and header.is_transactional and header.producer_id == 9
    assert control_marker(batch) == (False, 4)


# -- a partition's producer state ------------------------------------------------------------------------


def txn_batch(pid: int, epoch: int, seq: int, values: int = 1, transactional: bool = True) -> bytearray:
    return bytearray(build_batch([(None, b"v", [])] * values, timestamp_ms=1, producer_id=pid, producer_epoch=epoch,
                                 base_sequence=seq, attributes_extra=TRANSACTIONAL_BIT if transactional else 0))


def test_producer_state_tracks_open_transactions(tmp_path: Path):
    state = ProducerStateManager(tmp_path)
    state.update(parse_header(txn_batch(1, 0, 0)), 10)
    state.update(parse_header(txn_batch(2, 0, 0)), 11)
    assert state.first_unstable_offset() == 10 and state.in_transaction(1, 0)
    with pytest.raises(InvalidTxnStateError):
        state.check(parse_header(txn_batch(1, 0, 1, transactional=False)))
    completed = state.update(parse_header(bytearray(build_marker_batch(1, 0, True, 0, 1))), 12, (True, 0))
    assert (completed.first_offset, completed.last_offset, completed.aborted) == (10, 12, False)
    assert state.first_unstable_offset() == 11
    state.save(13)
    other = ProducerStateManager(tmp_path)
    assert other.load() == 13 and other.first_unstable_offset() == 11 and not other.in_transaction(1, 0)


def test_a_marker_with_a_bumped_epoch_fences_the_old_one(tmp_path: Path):
    state = ProducerStateManager(tmp_path)
    state.update(parse_header(txn_batch(1, 0, 0)), 0)
    state.update(parse_header(bytearray(build_marker_batch(1, 1, True, 0, 1))), 1, (True, 0))
    with pytest.raises(InvalidProducerEpochError):  # a late write of the ended transaction
        state.check(parse_header(txn_batch(1, 0, 1)))
    assert state.check(parse_header(txn_batch(1, 1, 0))) is None


def settings() -> TopicSettings:
    return TopicSettings(BrokerConfig.build({"log.index.interval.bytes": 200}, environ={}), {"segment.bytes": "1024"})


def append(plog: PartitionLog, data: bytearray) -> int:
    return plog.append(data, validate_batches(data, 1 << 20), 0).base_offset


def test_aborted_transactions_are_indexed_and_survive_reopening_and_truncation(tmp_path: Path):
    plog = PartitionLog(tmp_path / "t-0", "t", 0, settings())
    plog.open()
    first = append(plog, txn_batch(1, 0, 0, values=3))
    for i in range(8):  # other producers' data rolls segments meanwhile
        append(plog, bytearray(build_batch([(None, b"x" * 150, [])], timestamp_ms=1, producer_id=50 + i,
                                           producer_epoch=0, base_sequence=0)))
    marker = append(plog, bytearray(build_marker_batch(1, 0, False, 0, 1)))
    committed_first = append(plog, txn_batch(2, 0, 0))
    append(plog, bytearray(build_marker_batch(2, 0, True, 0, 1)))
    assert len(plog.segments) > 2
    aborted = plog.aborted_transactions(0, plog.log_end_offset)
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in aborted] == [(1, first, marker)]
    assert plog.aborted_transactions(marker + 1, plog.log_end_offset) == []
    assert committed_first > marker
    plog.close()

    reopened = PartitionLog(tmp_path / "t-0", "t", 0, settings())
    reopened.open()
    assert [(t.producer_id, t.first_offset) for t in reopened.aborted_transactions(0, 1 << 40)] == [(1, first)]
    reopened.truncate_to(marker)  # the abort marker is gone: the transaction is open again
    assert reopened.aborted_transactions(0, 1 << 40) == []
    assert reopened.producers.first_unstable_offset() == first
    reopened.close()


# -- a new coordinator's load ----------------------------------------------------------------------------


def test_a_new_coordinator_loads_its_whole_log_not_only_up_to_its_lagging_high_watermark(tmp_path: Path):
    """A follower that becomes leader of a `__transaction_state` partition knows the high watermark
    only as of its last fetch: a PrepareCommit the ISR acknowledged (the client was told "committed",
    some COMMIT markers may be written) can lie above it. Replayed only to the HW it would look Ongoing
    and be aborted by the timeout: COMMIT in some partitions, ABORT in the others."""
    import asyncio
    from types import SimpleNamespace

    from dm_broker.txn.coordinator import TXN_TOPIC, TransactionCoordinator, TxnSettings
    from dm_broker.txn.markers import Outcome

    def state_record(state: TxnState) -> bytearray:
        value = TxnLogValue(7, 3, 60_000, state, {"orders": [0, 1, 2]}, 1, 1)
        return bytearray(build_batch([(encode_key("t"), encode_value(value), [])], timestamp_ms=1))

    plog = PartitionLog(tmp_path / f"{TXN_TOPIC}-0", TXN_TOPIC, 0, settings())
    plog.open()
    append(plog, state_record(TxnState.ONGOING))
    prepared = append(plog, state_record(TxnState.PREPARE_COMMIT))
    partition = SimpleNamespace(log=plog, high_watermark=prepared)  # the PrepareCommit is above it
    broker = SimpleNamespace(partition=lambda topic, p: partition if (topic, p) == (TXN_TOPIC, 0) else None)
    completing: list[set] = []

    async def write_markers(meta, coordinator_epoch, remaining, reasons=None):
        completing.append(set(remaining))
        return Outcome.STALE  # this test only asks what the new coordinator would finish

    async def go() -> None:
        coordinator = TransactionCoordinator(broker, TxnSettings(partitions=1), write_markers)
        coordinator.load(0, 5)
        assert coordinator.txns["t"].state == TxnState.PREPARE_COMMIT
        await asyncio.sleep(0.05)
        await coordinator.close()

    asyncio.run(go())
    assert completing == [{("orders", 0), ("orders", 1), ("orders", 2)}], "the commit is finished everywhere"
    plog.close()


def test_a_transaction_whose_markers_cannot_be_written_says_so_in_the_log(tmp_path: Path, monkeypatch, caplog):
    """Marker retries are debug lines: a transaction stuck in PrepareCommit (a leader that keeps refusing its
    marker) held every next transaction of its producer with CONCURRENT_TRANSACTIONS and no word at INFO. After
    UNFINISHED_WARN_S the coordinator names the markers left and why each was not written."""
    import asyncio
    import logging
    from types import SimpleNamespace

    from dm_broker.txn import coordinator as txn_coordinator
    from dm_broker.txn.coordinator import TXN_TOPIC, TransactionCoordinator, TxnSettings
    from dm_broker.txn.markers import Outcome

    monkeypatch.setattr(txn_coordinator, "UNFINISHED_WARN_S", 0.1)
    value = TxnLogValue(7, 3, 60_000, TxnState.PREPARE_COMMIT, {"orders": [0, 1]}, 1, 1)
    plog = PartitionLog(tmp_path / f"{TXN_TOPIC}-0", TXN_TOPIC, 0, settings())
    plog.open()
    data = bytearray(build_batch([(encode_key("t"), encode_value(value), [])], timestamp_ms=1))
    plog.append(data, validate_batches(data, 1 << 20), 0)
    partition = SimpleNamespace(log=plog, high_watermark=plog.log_end_offset)
    broker = SimpleNamespace(partition=lambda topic, p: partition if (topic, p) == (TXN_TOPIC, 0) else None)

    async def write_markers(meta, coordinator_epoch, remaining, reasons=None):
        remaining.discard(("orders", 0))  # written; orders-1's leader keeps refusing
        reasons[("orders", 1)] = "NOT_ENOUGH_REPLICAS from broker 2"
        return Outcome.RETRY

    async def go() -> None:
        coordinator = TransactionCoordinator(broker, TxnSettings(partitions=1), write_markers)
        coordinator.load(0, 5)
        await asyncio.sleep(0.4)
        assert coordinator.txns["t"].state == TxnState.PREPARE_COMMIT
        await coordinator.close()

    with caplog.at_level(logging.WARNING, logger="dm_broker.txn.coordinator"):
        asyncio.run(go())
    plog.close()
    warnings = [r.getMessage() for r in caplog.records if "not finished" in r.getMessage()]
    assert warnings, "a stuck transaction is logged"
    assert "orders-1 (NOT_ENOUGH_REPLICAS from broker 2)" in warnings[0] and "orders-0" not in warnings[0]
    assert warnings[0].startswith("t: PREPARE_COMMIT not finished after")
