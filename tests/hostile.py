"""What the hostile-client tests share: a raw connection logged in over SASL/PLAIN as a user with no ACLs,
one request sent as bytes, and the broker's own account of how late its event loop was meanwhile
(dm_event_loop_stalls_total, by cause: the loop watchdog's verdict, issue 65)."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from dm_broker.protocol.build import make
from dm_broker.protocol.client import encode_request
from dm_broker.protocol.codec import request_class
from harness import BrokerProcess

# Stalls that are the broker's own doing: work on the loop (busy), or another of its threads holding the
# interpreter (other_thread: the codec thread). A crowded test machine adds run_queue stalls of its own.
OWN_CAUSES = ("busy", "other_thread", "blocked")


def read_frame(sock: socket.socket) -> bytes | None:
    """The next response frame (size prefix removed), or None when the broker closed the connection."""
    head = _read_exactly(sock, 4)
    if head is None:
        return None
    return _read_exactly(sock, struct.unpack(">i", head)[0])


def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
    parts, got = [], 0
    while got < n:
        try:
            chunk = sock.recv(min(n - got, 1 << 20))
        except ConnectionError:
            return None
        if not chunk:
            return None
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


@contextmanager
def logged_in(port: int, user: str, password: str, timeout: float = 60) -> Iterator[socket.socket]:
    """A connection authenticated with SASL/PLAIN (SaslHandshake v1, SaslAuthenticate v2)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        sock.sendall(encode_request(17, 1, 1, make(request_class(17, 1), mechanism="PLAIN")))
        assert read_frame(sock) is not None, "the broker closed the connection at the SASL handshake"
        token = b"\0" + user.encode() + b"\0" + password.encode()
        sock.sendall(encode_request(36, 2, 2, make(request_class(36, 2), auth_bytes=token)))
        answer = read_frame(sock)
        assert answer is not None and struct.unpack_from(">h", answer, 5)[0] == 0, f"login as {user} refused"
        yield sock
    finally:
        sock.close()


@dataclass
class Stalls:
    """The broker's stall counters when taken, to compare with later."""

    broker: BrokerProcess
    before: dict[str, float]

    @classmethod
    def of(cls, broker: BrokerProcess) -> Stalls:
        return cls(broker, {cause: broker.metric("dm_event_loop_stalls_total", cause=cause) for cause in OWN_CAUSES})

    def since(self) -> dict[str, float]:
        """The broker's own stalls over 100 ms since this was taken, by cause (only causes that grew)."""
        now = {cause: self.broker.metric("dm_event_loop_stalls_total", cause=cause) for cause in OWN_CAUSES}
        return {cause: now[cause] - self.before[cause] for cause in OWN_CAUSES if now[cause] > self.before[cause]}


def exchange(sock: socket.socket, frame: bytes) -> bytes | None:
    """Sends one request; its answer, or None when the broker closed the connection instead."""
    try:
        sock.sendall(frame)
    except ConnectionError:
        return None
    return read_frame(sock)
