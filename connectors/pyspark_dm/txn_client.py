"""The driver's side of the exactly-once sink's transactions, in raw protocol.

The executors' producers (librdkafka) open the transactions and leave them open; the driver ends
them once Spark commits the batch. librdkafka cannot end a transaction another process opened, so
the driver sends EndTxn itself, with the producer id and epoch the task reported, to the
transaction coordinator (FindCoordinator key type 1). The same client lists a prefix's open
transactions (ListTransactions on every broker) and aborts stray ones (InitProducerId, which
aborts what the transactional id had open and fences its producer).
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from typing import Any

from dm_broker.protocol.build import make
from dm_broker.protocol.codec import request_class
from kio.schema.errors import ErrorCode

from .errors import DmSourceError
from .wire import DmClient

FIND_COORDINATOR_VERSION = 4
END_TXN_VERSION = 3  # the classic protocol librdkafka's producers speak: the epoch stays as it was
INIT_PRODUCER_ID_VERSION = 4
LIST_TRANSACTIONS_VERSION = 0
TRANSACTIONAL_KEY = 1

# Answers after which the transaction will never commit: the producer was fenced (another
# producer took the id, or the coordinator aborted the transaction at its timeout and bumped the
# epoch) or no transaction is open any more.
LOST = frozenset({ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch, ErrorCode.invalid_txn_state,
                  ErrorCode.invalid_producer_id_mapping})
RETRY = frozenset({ErrorCode.concurrent_transactions, ErrorCode.coordinator_load_in_progress})
REDISCOVER = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})


@dataclass(frozen=True)
class TxnHandle:
    """An open transaction a task left for the driver to end."""

    transactional_id: str
    producer_id: int
    epoch: int


class TxnClient:
    def __init__(self, client: DmClient) -> None:
        self.client = client
        self._coordinators: dict[str, tuple[str, int]] = {}

    def _coordinator(self, transactional_id: str, refresh: bool) -> tuple[str, int] | None:
        if not refresh and transactional_id in self._coordinators:
            return self._coordinators[transactional_id]
        req = make(request_class(10, FIND_COORDINATOR_VERSION), key_type=TRANSACTIONAL_KEY,
                   coordinator_keys=(transactional_id,))
        for address in self._addresses():
            try:
                resp = self.client._send(address, req)
            except (OSError, ConnectionError):
                continue
            found = resp.coordinators[0]
            if found.error_code == ErrorCode.none:
                self._coordinators[transactional_id] = (found.host, found.port)
                return found.host, found.port
        return None

    def _addresses(self) -> list[tuple[str, int]]:
        meta = self.client.metadata([])
        return list(meta.brokers.values()) or list(self.client.bootstrap)

    def _on_coordinator(self, transactional_id: str, build: Any, what: str) -> ErrorCode:
        """Sends the request to the id's coordinator until it answers something final."""
        deadline = time.monotonic() + self.client.timeout
        refresh = False
        problem = "no coordinator"
        while time.monotonic() < deadline:
            address = self._coordinator(transactional_id, refresh)
            refresh = True
            if address is not None:
                try:
                    code = ErrorCode(self.client._send(address, build()).error_code)
                except (OSError, ConnectionError) as exc:
                    problem = str(exc)
                else:
                    if code not in RETRY and code not in REDISCOVER:
                        return code
                    problem = code.name
                    refresh = code in REDISCOVER
            time.sleep(0.1)
        raise DmSourceError(f"{what} for transactional id {transactional_id!r} did not finish in "
                            f"{self.client.timeout:.0f} s: {problem}")

    def end(self, handle: TxnHandle, commit: bool) -> bool:
        """True once the transaction is committed (or aborted); False when it can no longer be
        (see LOST). Repeating an end that already happened answers True, so this is safe to retry."""
        cls = request_class(26, END_TXN_VERSION)

        def build() -> Any:
            return make(cls, transactional_id=handle.transactional_id, producer_id=handle.producer_id,
                        producer_epoch=handle.epoch, committed=commit)

        code = self._on_coordinator(handle.transactional_id, build, "committing" if commit else "aborting")
        if code == ErrorCode.none:
            return True
        if code in LOST:
            return False
        raise DmSourceError(f"{'committing' if commit else 'aborting'} the transaction of "
                            f"{handle.transactional_id!r}: {code.name}")

    def fence(self, transactional_id: str, timeout_ms: int) -> None:
        """Aborts whatever `transactional_id` has open and fences its producer."""
        cls = request_class(22, INIT_PRODUCER_ID_VERSION)

        def build() -> Any:
            return make(cls, transactional_id=transactional_id,
                        transaction_timeout=datetime.timedelta(milliseconds=timeout_ms),
                        producer_id=-1, producer_epoch=-1)

        code = self._on_coordinator(transactional_id, build, "fencing")
        if code != ErrorCode.none:
            raise DmSourceError(f"fencing the transactional id {transactional_id!r}: {code.name}")

    def open_transactions(self, prefix: str) -> list[str]:
        """Transactional ids starting with `prefix` whose transaction is open, on every broker."""
        req = make(request_class(66, LIST_TRANSACTIONS_VERSION), state_filters=("Ongoing",), producer_id_filters=())
        found: set[str] = set()
        for address in self._addresses():
            try:
                resp = self.client._send(address, req)
            except (OSError, ConnectionError) as exc:
                raise DmSourceError(f"listing open transactions on {address[0]}:{address[1]}: {exc}") from None
            if resp.error_code != ErrorCode.none:
                raise DmSourceError(f"listing open transactions on {address[0]}:{address[1]}: "
                                    f"{ErrorCode(resp.error_code).name}")
            found.update(t.transactional_id for t in resp.transaction_states if t.transactional_id.startswith(prefix))
        return sorted(found)
