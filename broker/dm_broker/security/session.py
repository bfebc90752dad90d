"""Who is on the other end of one connection, and how far its authentication got."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .listeners import Listener
from .principal import ANONYMOUS, Principal
from .sasl import Authenticator

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36


@dataclass
class Session:
    listener: Listener
    host: str  # the client's address, as ACLs name hosts
    principal: Principal = ANONYMOUS
    authenticated: bool = True
    authenticator: Authenticator | None = None
    raw_tokens: bool = False  # after SaslHandshake v0: SASL tokens come as bare size-prefixed frames
    expires_at: float | None = None  # monotonic; KIP-368 session end
    reauth_ms: int = 0
    close_after_response: bool = False
    client_subject: str | None = None  # an mTLS client's certificate subject
    mechanism: str = field(default="")
    muted_until: float = 0.0  # monotonic: a client quota's throttle; its next request is not read before
    # what ends with the connection (its share sessions), by who asked: each asks once
    _at_close: dict[str, Callable[[], None]] = field(default_factory=dict, repr=False)

    # what the connection does once its client is authenticated (it reads frames up to socket.request.max.bytes)
    on_authenticated: Callable[[], None] | None = field(default=None, repr=False)

    def authenticated_now(self) -> None:
        self.authenticated = True
        if self.on_authenticated is not None:
            self.on_authenticated()

    def at_close(self, name: str, end: Callable[[], None]) -> None:
        """`end()` runs when the connection closes (once per `name`)."""
        self._at_close.setdefault(name, end)

    def close(self) -> None:
        """The connection closed: what was bound to it ends."""
        ends, self._at_close = list(self._at_close.values()), {}
        for end in ends:
            end()

    def mute(self, seconds: float) -> None:
        self.muted_until = max(self.muted_until, time.monotonic() + seconds)

    @classmethod
    def plain(cls, listener: Listener, host: str) -> Session:
        return cls(listener, host)

    def expired(self) -> bool:
        return self.expires_at is not None and time.monotonic() >= self.expires_at

    def start_lifetime(self) -> int:
        """After a successful authentication: the session lifetime to tell the client (0: none)."""
        if self.reauth_ms <= 0:
            self.expires_at = None
            return 0
        self.expires_at = time.monotonic() + self.reauth_ms / 1000
        return self.reauth_ms
