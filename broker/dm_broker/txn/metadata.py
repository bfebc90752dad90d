"""A transactional id's state at its coordinator, and the transitions the coordinator's APIs make
(pure: a transition returns the state to write to `__transaction_state`, or the error to answer with;
the coordinator applies it once the write is replicated).

    Empty ──AddPartitions──► Ongoing ──EndTxn──► PrepareCommit ──markers──► CompleteCommit
      ▲                        │                 PrepareAbort  ──markers──► CompleteAbort
      └──── InitProducerId ◄───┴──── (timeout, or a new InitProducerId: abort with a bumped epoch)

Epochs fence zombies: InitProducerId bumps the epoch (a new producer id once it is exhausted);
an abort forced by a timeout or a new InitProducerId bumps it too; a client of transaction
version 2 (KIP-890: EndTxn v5, Produce v12) gets a bumped epoch at every transaction end, so a late
write of an ended transaction can never land in the next one."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode as E

from .records import NO_PRODUCER_ID, TxnLogValue, TxnState

NO_EPOCH = -1
MAX_EPOCH = (1 << 15) - 1
TV2 = 2
TopicPartition = tuple[str, int]


class TxnError(Exception):
    def __init__(self, code: E, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_epoch: int = NO_EPOCH  # the epoch before the last bump (a retried EndTxn v5 is recognised)
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_version: int = 0
    pending: TxnState | None = None  # a transition being written
    fenced: bool = False  # the abort under way was forced (timeout, a new instance): its epoch was bumped

    def to_value(self) -> TxnLogValue:
        parts: dict[str, list[int]] = {}
        for topic, p in self.partitions:
            parts.setdefault(topic, []).append(p)
        return TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state, parts,
                           self.last_update_ms, self.start_ms, self.previous_producer_id, self.next_producer_id,
                           self.client_version)

    @classmethod
    def from_value(cls, transactional_id: str, v: TxnLogValue) -> TxnMetadata:
        partitions = {(t, p) for t, ps in v.partitions.items() for p in ps}
        return cls(transactional_id, v.producer_id, v.producer_epoch, v.timeout_ms, v.state, partitions, v.start_ms,
                   v.last_update_ms, previous_producer_id=v.previous_producer_id,
                   next_producer_id=v.next_producer_id, client_version=v.client_version)

    @property
    def epoch_exhausted(self) -> bool:
        return self.producer_epoch >= MAX_EPOCH - 1

    def copy(self, **changes) -> TxnMetadata:
        return dataclasses.replace(self, **{"partitions": set(self.partitions), "pending": None, **changes})


# -- InitProducerId ---------------------------------------------------------------------------------


def prepare_init(meta: TxnMetadata, timeout_ms: int, expected: tuple[int, int] | None, now: int,
                 new_producer_id: int | None) -> TxnMetadata:
    """The state InitProducerId writes, or TxnError. `expected`: the (producer id, epoch) a client
    recovering from an error (KIP-360) says it had. An ongoing transaction is aborted first, with a
    bumped epoch: the target is then PrepareAbort with `fenced`, and the client is told
    CONCURRENT_TRANSACTIONS and retries. `new_producer_id`: an id to move to when the epoch is exhausted."""
    if meta.pending is not None:
        raise TxnError(E.concurrent_transactions)
    if expected is not None and not _known_producer(meta, *expected):
        raise TxnError(E.producer_fenced, f"producer {expected[0]} epoch {expected[1]} is not the current producer "
                                          f"of {meta.transactional_id}")
    if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        raise TxnError(E.concurrent_transactions)
    if meta.state == TxnState.ONGOING:
        if expected is not None and meta.producer_epoch != NO_EPOCH and expected[0] == meta.producer_id \
                and expected[1] != meta.producer_epoch:
            # A producer recovering (KIP-360) names the epoch it had: an older one is a zombie of a producer
            # already fenced, which must not abort the transaction its successor has open (issue 65).
            raise TxnError(E.producer_fenced, f"epoch {expected[1]} is not the current epoch {meta.producer_epoch} "
                                              f"of {meta.transactional_id}, whose transaction is open")
        return _fenced_abort(meta, now)
    if meta.state not in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
        raise TxnError(E.unknown_server_error, f"{meta.transactional_id} is {meta.state.kafka_name}")
    if expected is not None and meta.producer_epoch != NO_EPOCH and expected[0] == meta.producer_id \
            and expected[1] != meta.producer_epoch:
        if expected[1] != meta.last_producer_epoch or meta.last_producer_epoch == NO_EPOCH:
            raise TxnError(E.producer_fenced, f"epoch {expected[1]} is not the current epoch {meta.producer_epoch}")
        # The epoch before the last bump that a producer asked for: a retry of that InitProducerId (its answer
        # was lost), answered with the epoch it bumped to, not fenced, as Kafka does. Only the producer that
        # asked for the bump can name that epoch: an init naming no epoch, and a fence, forget it.
        return meta.copy(timeout_ms=timeout_ms, state=TxnState.EMPTY, partitions=set(), start_ms=-1,
                         last_update_ms=now, fenced=False)
    if meta.epoch_exhausted:
        if new_producer_id is None:
            raise TxnError(E.unknown_server_error, "no producer id to move to")
        return meta.copy(previous_producer_id=meta.producer_id, producer_id=new_producer_id, producer_epoch=0,
                         last_producer_epoch=NO_EPOCH, timeout_ms=timeout_ms, state=TxnState.EMPTY, partitions=set(),
                         start_ms=-1, last_update_ms=now, fenced=False)
    # A bump a producer asked for naming its epoch remembers that epoch (a retry of it is recognised above); a
    # new instance naming none leaves nothing to retry (Kafka's prepareIncrementProducerEpoch).
    return meta.copy(last_producer_epoch=NO_EPOCH if expected is None else meta.producer_epoch,
                     producer_epoch=meta.producer_epoch + 1, timeout_ms=timeout_ms, state=TxnState.EMPTY,
                     partitions=set(), start_ms=-1, last_update_ms=now, fenced=False)


def _known_producer(meta: TxnMetadata, producer_id: int, epoch: int) -> bool:
    # A just-created id (no epoch yet) is anyone's; the current producer id is (its epoch is checked
    # when it is bumped); the previous one is when its epoch was exhausted (a retry of the rotation).
    return meta.producer_epoch == NO_EPOCH or producer_id == meta.producer_id or \
        (producer_id == meta.previous_producer_id and epoch >= MAX_EPOCH - 1)


def _fenced_abort(meta: TxnMetadata, now: int) -> TxnMetadata:
    """An ongoing transaction aborted by the coordinator (a new instance of the producer, or its
    timeout): the epoch is bumped, so the old instance's next write is fenced."""
    epoch = meta.producer_epoch + 1 if meta.producer_epoch < MAX_EPOCH else meta.producer_epoch
    # The fenced epoch is not remembered as the last one: its producer must not pass for a retry of a bump
    # (Kafka's prepareFenceProducerEpoch).
    return meta.copy(last_producer_epoch=NO_EPOCH, producer_epoch=epoch, state=TxnState.PREPARE_ABORT,
                     last_update_ms=now, fenced=True)


def prepare_timeout_abort(meta: TxnMetadata, now: int) -> TxnMetadata | None:
    """The abort of a transaction open longer than its timeout (None when it is not)."""
    if meta.state != TxnState.ONGOING or meta.pending is not None or now - meta.start_ms <= meta.timeout_ms:
        return None
    return _fenced_abort(meta, now)


# -- AddPartitionsToTxn, AddOffsetsToTxn ----------------------------------------------------------------


def check_producer(meta: TxnMetadata | None, producer_id: int, epoch: int) -> TxnMetadata:
    if meta is None or meta.producer_id != producer_id:
        raise TxnError(E.invalid_producer_id_mapping, f"producer {producer_id} does not hold this transactional id")
    if meta.producer_epoch != epoch:
        raise TxnError(E.producer_fenced if epoch < meta.producer_epoch else E.invalid_producer_epoch,
                       f"epoch {epoch}, current {meta.producer_epoch}")
    return meta


def prepare_add(meta: TxnMetadata | None, producer_id: int, epoch: int, partitions: set[TopicPartition],
                now: int, client_version: int = 0) -> TxnMetadata | None:
    """The state with `partitions` added (None when they are in the transaction already)."""
    meta = check_producer(meta, producer_id, epoch)
    if meta.pending is not None or meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        raise TxnError(E.concurrent_transactions)
    if meta.state == TxnState.ONGOING and partitions <= meta.partitions:
        return None
    if meta.state not in (TxnState.EMPTY, TxnState.ONGOING, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
        raise TxnError(E.invalid_txn_state, f"{meta.transactional_id} is {meta.state.kafka_name}")
    starting = meta.state != TxnState.ONGOING
    return meta.copy(state=TxnState.ONGOING,
                     partitions=(set() if starting else meta.partitions) | partitions,
                     start_ms=now if starting else meta.start_ms, last_update_ms=now,
                     client_version=max(meta.client_version, client_version) if not starting else client_version,
                     fenced=False)


def verify(meta: TxnMetadata | None, producer_id: int, epoch: int, partition: TopicPartition) -> E:
    """KIP-890: a partition leader asks whether a transactional write belongs to an ongoing
    transaction that holds its partition."""
    try:
        meta = check_producer(meta, producer_id, epoch)
    except TxnError as exc:
        return E.producer_fenced if exc.code == E.invalid_producer_epoch else exc.code
    if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
        return E.concurrent_transactions
    if meta.state != TxnState.ONGOING or partition not in meta.partitions:
        return E.transaction_abortable
    return E.none


# -- EndTxn ---------------------------------------------------------------------------------------------


def prepare_end(meta: TxnMetadata | None, producer_id: int, epoch: int, commit: bool, now: int,
                client_version: int, new_producer_id: int | None = None) -> TxnMetadata | None:
    """The Prepare* state EndTxn writes; None when the request repeats an end already done (the
    client is answered as then). With transaction version 2 the epoch is bumped; when that exhausts
    it, `new_producer_id` is where the producer goes on (epoch 0) once the transaction completes."""
    if meta is None or (meta.producer_id != producer_id and not _retry_after_rotation(meta, producer_id, epoch)):
        raise TxnError(E.invalid_producer_id_mapping, f"producer {producer_id} does not hold this transactional id")
    if meta.pending is not None:
        raise TxnError(E.concurrent_transactions)
    bumped = client_version >= TV2
    ended = {TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}
    if meta.state in ended:
        # A retry of an end already under way or done, if it asks the same and carries the epoch of then.
        same = meta.state in ((TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT) if commit else
                              (TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT))
        epoch_then = meta.last_producer_epoch if bumped else meta.producer_epoch
        if meta.producer_id == producer_id and epoch != epoch_then:
            raise TxnError(E.producer_fenced if epoch < meta.producer_epoch else E.invalid_producer_epoch,
                           f"epoch {epoch}, current {meta.producer_epoch}")
        if not same or meta.fenced:
            raise TxnError(E.invalid_txn_state, f"the transaction is {meta.state.kafka_name}")
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            raise TxnError(E.concurrent_transactions)
        return None
    check_producer(meta, producer_id, epoch)
    if meta.state == TxnState.EMPTY and not commit and bumped:
        # An abort with nothing in the transaction (transaction version 2): the epoch still moves on.
        return meta.copy(last_producer_epoch=epoch, producer_epoch=min(epoch + 1, MAX_EPOCH),
                         state=TxnState.PREPARE_ABORT, last_update_ms=now, client_version=client_version)
    if meta.state != TxnState.ONGOING:
        raise TxnError(E.invalid_txn_state, f"no transaction is ongoing for {meta.transactional_id} "
                                            f"({meta.state.kafka_name})")
    target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    if bumped:
        rotate = epoch + 1 >= MAX_EPOCH - 1 and new_producer_id is not None
        return meta.copy(last_producer_epoch=epoch, producer_epoch=min(epoch + 1, MAX_EPOCH), state=target,
                         last_update_ms=now, client_version=client_version, fenced=False,
                         next_producer_id=new_producer_id if rotate else NO_PRODUCER_ID)
    return meta.copy(state=target, last_update_ms=now, client_version=max(meta.client_version, client_version),
                     fenced=False)


def _retry_after_rotation(meta: TxnMetadata, producer_id: int, epoch: int) -> bool:
    return meta.client_version >= TV2 and producer_id == meta.previous_producer_id and epoch >= MAX_EPOCH - 1


def complete(meta: TxnMetadata, now: int) -> TxnMetadata:
    """After every marker is written: the transaction is over (and an exhausted producer id replaced)."""
    state = TxnState.COMPLETE_COMMIT if meta.state == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
    if meta.next_producer_id != NO_PRODUCER_ID:
        return meta.copy(state=state, partitions=set(), last_update_ms=now, previous_producer_id=meta.producer_id,
                         producer_id=meta.next_producer_id, producer_epoch=0, last_producer_epoch=NO_EPOCH,
                         next_producer_id=NO_PRODUCER_ID)
    return meta.copy(state=state, partitions=set(), last_update_ms=now, fenced=meta.fenced)


def end_result(meta: TxnMetadata) -> tuple[int, int]:
    """The producer id and epoch EndTxn v5 answers with: those of the next transaction."""
    if meta.next_producer_id != NO_PRODUCER_ID:
        return meta.next_producer_id, 0
    return meta.producer_id, meta.producer_epoch
