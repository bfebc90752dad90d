"""The server side of SASL PLAIN and SCRAM for one connection (no I/O: tokens in, tokens out).

`Authenticator.handshake(mechanism)` picks the mechanism; `await step(token)` consumes a client token
and returns the server's answer, until `principal` is set. Any failure raises AuthenticationFailed with
the message the client gets (Kafka's wording, which never tells a wrong password from an unknown
user). With a LoginGuard, password hashing runs off the event loop and recent failures of the user
name or the client address delay the next check (security/login_guard.py).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass

from scramp import ScramException, ScramMechanism

from .login_guard import LoginGuard, TooManyAttempts
from .principal import Principal, user
from .scram import MECHANISMS, ScramCredential, verify_password

CredentialLookup = Callable[[str, str], ScramCredential | None]  # (user, mechanism) -> credential
INVALID = "Authentication failed: Invalid username or password"
BUSY = "Authentication failed: too many attempts for this user name or from this address; retry later"


class AuthenticationFailed(Exception):
    pass


@dataclass
class SaslSettings:
    mechanisms: list[str]
    plain_users: dict[str, str]  # from the listener's PlainLoginModule user_<name> entries
    credentials: CredentialLookup
    max_token_bytes: int = 524288


class Authenticator:
    def __init__(self, settings: SaslSettings, host: str = "", guard: LoginGuard | None = None) -> None:
        self.settings = settings
        self.host = host
        self.guard = guard
        self.mechanism: str | None = None
        self.principal: Principal | None = None
        self._scram = None  # scramp's server while a SCRAM exchange runs
        self._user = ""

    def handshake(self, mechanism: str) -> bool:
        """False when the listener does not offer `mechanism` (UNSUPPORTED_SASL_MECHANISM)."""
        if mechanism not in self.settings.mechanisms:
            return False
        self.mechanism = mechanism
        self.principal = None
        self._scram = None
        return True

    async def step(self, token: bytes) -> bytes:
        if self.mechanism is None:
            raise AuthenticationFailed("SaslAuthenticate before SaslHandshake")
        if len(token) > self.settings.max_token_bytes:
            raise AuthenticationFailed(f"SASL token of {len(token)} bytes exceeds sasl.server.max.receive.size")
        if self.principal is not None:
            raise AuthenticationFailed("the SASL exchange is already complete")
        if self.mechanism == "PLAIN":
            return await self._plain(token)
        return await self._scram_step(token)

    async def _plain(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, name, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        if not name:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        if authzid and authzid != name:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        if self.guard is None:
            ok = await self._plain_ok(name, password)
        else:
            try:
                async with self.guard.attempt(name, self.host, costly=self._hashes(name)):
                    ok = await self._plain_ok(name, password)
                    if not ok:
                        self.guard.failed(name, self.host)
            except TooManyAttempts:
                raise AuthenticationFailed(BUSY) from None
        if not ok:
            raise AuthenticationFailed(INVALID)
        self.principal = user(name)
        return b""

    def _hashes(self, name: str) -> bool:
        """Whether checking a PLAIN password for `name` costs a PBKDF2 (a SCRAM user, not a JAAS one)."""
        return name not in self.settings.plain_users and any(
            self.settings.credentials(name, m) is not None for m in ("SCRAM-SHA-512", "SCRAM-SHA-256"))

    async def _plain_ok(self, name: str, password: str) -> bool:
        expected = self.settings.plain_users.get(name)
        if expected is not None:
            return hmac.compare_digest(expected.encode(), password.encode())
        for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            credential = self.settings.credentials(name, mechanism)
            if credential is not None:
                # PBKDF2 over the credential's iterations: milliseconds of CPU, never on the event loop
                if self.guard is not None:
                    return await self.guard.password_matches(credential, password)
                return verify_password(credential, password)
        return False

    async def _scram_step(self, token: bytes) -> bytes:
        assert self.mechanism in MECHANISMS
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SCRAM message: not UTF-8") from None
        try:
            if self._scram is None:
                lookup = self.settings.credentials

                def auth_info(sasl_name: str) -> tuple[bytes, bytes, bytes, int]:
                    self._user = sasl_name.replace("=2C", ",").replace("=3D", "=")  # RFC 5802 saslname
                    credential = lookup(self._user, self.mechanism or "")
                    if credential is None:
                        raise ScramException("unknown user", "unknown-user")
                    return credential.raw()

                server = ScramMechanism(self.mechanism).make_server(auth_info)
                server.set_client_first(text)
                self._scram = server
                return server.get_server_first().encode()
            server = self._scram
            if self.guard is None:
                server.set_client_final(text)
            else:
                try:
                    async with self.guard.attempt(self._user, self.host, costly=False):
                        try:
                            server.set_client_final(text)
                        except ScramException:
                            self.guard.failed(self._user, self.host)
                            raise
                except TooManyAttempts:
                    self._scram = None
                    raise AuthenticationFailed(BUSY) from None
            answer = server.get_server_final().encode()
            self.principal = user(self._user)
            self._scram = None
            return answer
        except ScramException as exc:
            self._scram = None
            raise AuthenticationFailed(f"Authentication failed during authentication due to invalid credentials "
                                       f"with SASL mechanism {self.mechanism}") from exc
        except (ValueError, KeyError, IndexError, TypeError) as exc:  # a malformed message scramp did not expect
            self._scram = None
            raise AuthenticationFailed(f"Invalid SCRAM message: {exc}") from None
