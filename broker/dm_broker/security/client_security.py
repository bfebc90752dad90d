"""How a client of dm's own (a broker's replication, the CLI, the Spark connector) connects to a listener."""

from __future__ import annotations

import ssl
from dataclasses import dataclass


@dataclass(frozen=True)
class ClientSecurity:
    """The protocol, TLS context and SASL credentials of one connection's client side."""

    protocol: str
    ssl_context: ssl.SSLContext | None = None
    mechanism: str = ""
    username: str = ""
    password: str = ""

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")
