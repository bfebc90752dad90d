"""The client side of a SASL exchange (PLAIN, SCRAM-SHA-256/512), as tokens to send and replies to
check, so a blocking client and an asyncio one drive the same steps over their own connections."""

from __future__ import annotations

from collections.abc import Callable, Generator

CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

# Each yield is a token to send in a SaslAuthenticate request; the server's reply is sent back in.
Exchange = Generator[bytes, bytes, None]


def client_exchange(mechanism: str, username: str, password: str) -> Exchange:
    """Raises ValueError for a mechanism dm's clients do not speak, and scramp's error when the
    server's final message does not prove it knows the credential."""
    if mechanism == "PLAIN":
        yield f"\0{username}\0{password}".encode()
        return
    if mechanism not in CLIENT_MECHANISMS:
        raise ValueError(f"SASL mechanism {mechanism!r}: dm's clients speak {', '.join(CLIENT_MECHANISMS)}")
    from scramp import ScramClient

    client = ScramClient([mechanism], username, password)
    client.set_server_first((yield client.get_client_first().encode()).decode())
    client.set_server_final((yield client.get_client_final().encode()).decode())  # the server knows us


def run_exchange(exchange: Exchange, authenticate: Callable[[bytes], bytes]) -> None:
    """Drives `exchange` with a blocking `authenticate(token) -> reply`."""
    token = next(exchange)
    while True:
        reply = authenticate(token)
        try:
            token = exchange.send(reply)
        except StopIteration:
            return
