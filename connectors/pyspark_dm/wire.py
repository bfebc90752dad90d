"""A small blocking Kafka wire client for the Spark connector.

Spark runs data source code in plain Python worker processes, one call at a time, so a blocking
socket per broker is simpler and cheaper here than an event loop. Requests and responses are the
same kio schemas the broker speaks (encode_request/decode_response are shared with it).
"""

from __future__ import annotations

import datetime
import socket
import ssl
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dm_broker.protocol.build import make, nested
from dm_broker.protocol.client import check_correlation, decode_response, encode_request
from dm_broker.protocol.codec import request_class
from dm_broker.protocol.fetch_decoder import VERSION as FETCH_VERSION
from dm_broker.protocol.fetch_decoder import decode_fetch_response
from dm_broker.security.client_config import wire_security
from dm_broker.security.client_security import ClientSecurity
from dm_broker.security.sasl_client import client_exchange, run_exchange
from kio.schema.errors import ErrorCode
from scramp import ScramException

from .errors import DmSourceError

METADATA_VERSION = 12
LIST_OFFSETS_VERSION = 7
EARLIEST = -2
LATEST = -1
RETRIABLE = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available, ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch, ErrorCode.request_timed_out, ErrorCode.not_enough_replicas,
    ErrorCode.kafka_storage_error, ErrorCode.offset_not_available,
})
_SIZE = struct.Struct(">i")
TopicPartition = tuple[str, int]


def parse_bootstrap(servers: str, option: str = "kafka.bootstrap.servers") -> list[tuple[str, int]]:
    hosts = []
    for item in servers.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit() or not host:
            raise DmSourceError(f"option {option}: {item!r} is not host:port")
        hosts.append((host.strip("[]"), int(port)))
    if not hosts:
        raise DmSourceError(f"option {option} is empty")
    return hosts


class BrokerConnection:
    """One blocking connection, over TLS and authenticated with SASL when `security` says so; Kafka
    answers requests on a connection in order."""

    def __init__(self, host: str, port: int, timeout: float, client_id: str,
                 security: ClientSecurity | None = None) -> None:
        self.address = f"{host}:{port}"
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self._correlation = 0
        try:
            if security is not None and security.ssl_context is not None:
                sock = security.ssl_context.wrap_socket(sock, server_hostname=host)
            self.sock = sock
            if security is not None and security.sasl:
                self._authenticate(security)
        except BaseException:
            sock.close()
            raise

    def _authenticate(self, security: ClientSecurity) -> None:
        handshake = self.request(make(request_class(17, 1), mechanism=security.mechanism))
        if handshake.error_code != ErrorCode.none:
            raise DmSourceError(f"{self.address}: SASL mechanism {security.mechanism} is not enabled on this "
                                f"listener (it offers {', '.join(handshake.mechanisms) or 'none'})")

        def authenticate(token: bytes) -> bytes:
            resp = self.request(make(request_class(36, 2), auth_bytes=token))
            if resp.error_code != ErrorCode.none:
                raise DmSourceError(f"{self.address}: SASL authentication as {security.username!r} failed: "
                                    f"{resp.error_message or resp.error_code.name}")
            return bytes(resp.auth_bytes)

        try:
            run_exchange(client_exchange(security.mechanism, security.username, security.password), authenticate)
        except ScramException as exc:
            raise DmSourceError(f"{self.address}: the broker did not prove it knows {security.username!r}'s "
                                f"SCRAM credential: {exc}") from None

    def request(self, body: Any) -> Any:
        return decode_response(int(body.__api_key__), int(body.__version__), self.request_frame(body))[1]

    def request_frame(self, body: Any) -> memoryview:
        """Sends a request; returns the undecoded response frame, its correlation id checked."""
        self._correlation += 1
        self.sock.sendall(encode_request(int(body.__api_key__), int(body.__version__), self._correlation, body,
                                         self.client_id))
        try:
            (size,) = _SIZE.unpack(self._read_exactly(4))
        except ConnectionError as exc:
            if self._correlation == 1 and isinstance(self.sock, ssl.SSLSocket):
                raise ConnectionError(f"{exc} before answering: a TLS listener with ssl.client.auth=required does "
                                      "that to a client without a certificate its truststore accepts") from None
            raise
        frame = self._read_exactly(size)
        check_correlation(frame, self._correlation)
        return frame

    def _read_exactly(self, size: int) -> memoryview:
        """Received in place; read-only because kio refuses writable buffers."""
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        while got < size:
            n = self.sock.recv_into(view[got:])
            if n == 0:
                raise ConnectionError(f"{self.address} closed the connection")
            got += n
        return view.toreadonly()

    def close(self) -> None:
        self.sock.close()


@dataclass
class PartitionInfo:
    leader: int
    leader_epoch: int
    error: ErrorCode


@dataclass
class ClusterMetadata:
    brokers: dict[int, tuple[str, int]]
    topics: dict[str, dict[int, PartitionInfo]] = field(default_factory=dict)
    topic_errors: dict[str, ErrorCode] = field(default_factory=dict)


@dataclass
class FetchResult:
    error: ErrorCode
    high_watermark: int
    log_start_offset: int
    records: bytes | memoryview
    aborted: list[tuple[int, int]] | None = None  # read_committed: (producer id, first offset)


class DmClient:
    """Metadata, offsets and fetches against a dm (or any Kafka) cluster; reconnects and retries
    retriable errors (leader moves) until `timeout` seconds have passed."""

    def __init__(self, bootstrap: str, timeout: float = 30.0, client_id: str = "pyspark-dm",
                 read_committed: bool = False, client_config: Mapping[str, str] | None = None) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        # librdkafka-style settings (options.client_config): TLS and SASL for every connection
        self.security = wire_security(client_config or {})
        self.read_committed = read_committed  # isolation.level=read_committed for offsets and fetches
        self.bootstrap_text = bootstrap
        self.timeout = timeout
        self.client_id = client_id
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self._metadata: ClusterMetadata | None = None

    # -- connections ---------------------------------------------------------------------------
    def _connection(self, address: tuple[str, int]) -> BrokerConnection:
        conn = self._connections.get(address)
        if conn is None:
            conn = BrokerConnection(*address, timeout=self.timeout, client_id=self.client_id, security=self.security)
            self._connections[address] = conn
        return conn

    def _drop(self, address: tuple[str, int]) -> None:
        conn = self._connections.pop(address, None)
        if conn is not None:
            conn.close()

    def _send(self, address: tuple[str, int], body: Any) -> Any:
        return decode_response(int(body.__api_key__), int(body.__version__), self._send_frame(address, body))[1]

    def _send_frame(self, address: tuple[str, int], body: Any) -> memoryview:
        try:
            return self._connection(address).request_frame(body)
        except (OSError, ConnectionError, EOFError):
            self._drop(address)
            raise

    def close(self) -> None:
        for address in list(self._connections):
            self._drop(address)

    # -- metadata ------------------------------------------------------------------------------
    def metadata(self, topics: list[str] | None = None) -> ClusterMetadata:
        """Metadata for `topics` (all topics when None) from any reachable bootstrap or known broker."""
        cls = request_class(3, METADATA_VERSION)
        topic_cls = nested(cls, "MetadataRequestTopic")
        req = make(cls, topics=None if topics is None else tuple(topic_cls(topic_id=None, name=t) for t in topics),
                   allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        candidates = list(self.bootstrap)
        if self._metadata is not None:
            candidates = list(self._metadata.brokers.values()) + candidates
        failures = []
        for address in candidates:
            try:
                resp = self._send(address, req)
            except (OSError, ConnectionError) as exc:
                failures.append(f"{address[0]}:{address[1]}: {exc}")
                continue
            meta = ClusterMetadata(brokers={b.node_id: (b.host, b.port) for b in resp.brokers})
            for t in resp.topics:
                if t.error_code != ErrorCode.none:
                    meta.topic_errors[t.name] = t.error_code
                    continue
                meta.topics[t.name] = {p.partition_index: PartitionInfo(p.leader_id, p.leader_epoch, p.error_code)
                                       for p in t.partitions}
            self._metadata = meta
            return meta
        raise DmSourceError(f"option kafka.bootstrap.servers: no broker of {self.bootstrap_text!r} is reachable "
                            f"({'; '.join(failures)})")

    def leader_address(self, topic: str, partition: int, refresh: bool = False) -> tuple[str, int] | None:
        meta = self._metadata
        if refresh or meta is None or topic not in meta.topics or partition not in meta.topics[topic]:
            meta = self.metadata([topic])
        info = meta.topics.get(topic, {}).get(partition)
        if info is None or info.leader < 0 or info.leader not in meta.brokers:
            return None
        return meta.brokers[info.leader]

    # -- offsets -------------------------------------------------------------------------------
    def list_offsets(self, queries: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Offset per partition for a timestamp (ms), EARLIEST or LATEST; -1 where no record has a
        timestamp at or after the one asked for. Read committed, LATEST is the last stable offset."""
        cls = request_class(2, LIST_OFFSETS_VERSION)
        topic_cls, part_cls = nested(cls, "ListOffsetsTopic"), nested(cls, "ListOffsetsPartition")
        results: dict[TopicPartition, int] = {}
        pending = dict(queries)
        deadline = time.monotonic() + self.timeout
        refresh = False
        while pending:
            by_leader: dict[tuple[str, int], list[TopicPartition]] = {}
            for tp in pending:
                address = self.leader_address(*tp, refresh=refresh)
                if address is not None:
                    by_leader.setdefault(address, []).append(tp)
            last_error = "no leader"
            for address, tps in by_leader.items():
                topics: dict[str, list[Any]] = {}
                for topic, partition in tps:
                    topics.setdefault(topic, []).append(part_cls(partition_index=partition, current_leader_epoch=-1,
                                                                 timestamp=pending[(topic, partition)]))
                req = make(cls, replica_id=-1, isolation_level=int(self.read_committed),
                           topics=tuple(topic_cls(name=t, partitions=tuple(ps)) for t, ps in topics.items()))
                try:
                    resp = self._send(address, req)
                except (OSError, ConnectionError) as exc:
                    last_error = str(exc)
                    continue
                for t in resp.topics:
                    for p in t.partitions:
                        tp = (t.name, p.partition_index)
                        if p.error_code == ErrorCode.none:
                            results[tp] = p.offset
                            pending.pop(tp, None)
                        elif p.error_code in RETRIABLE:
                            last_error = p.error_code.name
                        else:
                            raise DmSourceError(f"listing offsets of {tp[0]}-{tp[1]}: {p.error_code.name}")
            if pending:
                if time.monotonic() > deadline:
                    raise DmSourceError(f"listing offsets of {sorted(pending)} timed out: {last_error}")
                refresh = True
                time.sleep(0.2)
        return results

    # -- fetch ---------------------------------------------------------------------------------
    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int = 500) -> FetchResult:
        """One fetch from the partition leader; retriable errors and lost connections are retried
        against the current leader until the client timeout. Read committed, it stops at the last
        stable offset and lists the aborted transactions of the range."""
        cls = request_class(1, FETCH_VERSION)
        topic_cls, part_cls = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
        req = make(cls, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1,
                   max_bytes=max_bytes, isolation_level=int(self.read_committed), session_id=0, session_epoch=-1,
                   topics=(topic_cls(topic=topic, partitions=(make(
                       part_cls, partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                       last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=max_bytes),)),),
                   forgotten_topics_data=(), rack_id="")
        deadline = time.monotonic() + self.timeout
        refresh = False
        while True:
            address = self.leader_address(topic, partition, refresh=refresh)
            problem = "no leader"
            if address is not None:
                try:
                    # decoded by hand: the records stay a view of the received frame (no copy)
                    _, error, _, partitions = decode_fetch_response(self._send_frame(address, req))
                except (OSError, ConnectionError) as exc:
                    problem = str(exc)
                else:
                    if error != ErrorCode.none:
                        problem = ErrorCode(error).name
                    else:
                        _, data = next(partitions)
                        code = ErrorCode(data.error_code)
                        if code not in RETRIABLE:
                            return FetchResult(code, data.high_watermark, data.log_start_offset,
                                               data.records if data.records is not None else b"", data.aborted)
                        problem = code.name
            if time.monotonic() > deadline:
                raise DmSourceError(f"fetching {topic}-{partition} at offset {offset} failed for "
                                    f"{self.timeout:.0f} s: {problem}")
            refresh = True
            time.sleep(0.2)

    def __enter__(self) -> DmClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
