"""Who an HTTP request comes from: an mTLS client certificate (mapped like a Kafka listener's), HTTP Basic
checked as a SASL/PLAIN login would be (the listener's PlainLoginModule users, then the cluster's SCRAM
credentials, through the broker's login guard), or ANONYMOUS without authentication."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import TYPE_CHECKING

from aiohttp import web

from ...security.jaas import parse_jaas
from ...security.listeners import Listener
from ...security.login_guard import TooManyAttempts
from ...security.principal import Principal, user
from ...security.scram import ScramCredential, verify_password
from ...security.session import Session
from ...security.tls import peer_subject
from .errors import RestError

if TYPE_CHECKING:
    from ...broker import Broker

REALM = 'Basic realm="dm", charset="UTF-8"'


def unauthorized(message: str) -> RestError:
    return RestError(401, 40101, message)


class HttpAuthenticator:
    def __init__(self, broker: Broker, listener: Listener) -> None:
        self.broker = broker
        self.listener = listener
        self.basic = broker.config["http.authentication.method"] == "BASIC"
        jaas = broker.config.jaas_config(listener.name, "PLAIN")
        self.plain_users = parse_jaas(jaas).users if jaas else {}
        # SCRAM users' passwords verified recently, with the credential they matched: a PBKDF2 per request
        # would cost milliseconds each, and a changed or deleted credential no longer matches.
        self._verified: dict[tuple[str, str, bytes], ScramCredential] = {}

    async def session(self, request: web.Request) -> Session:
        host = (request.transport.get_extra_info("peername") or ("", 0))[0] if request.transport else ""
        session = Session(self.listener, host)
        if self.listener.tls and request.transport is not None:
            subject = peer_subject(request.transport.get_extra_info("ssl_object"))
            session.client_subject = subject
            if subject is not None:
                try:
                    session.principal = self.broker.security.principal_from_certificate(subject)
                except ValueError as exc:
                    raise unauthorized(f"the client certificate maps to no principal: {exc}") from None
        if self.basic:
            session.principal = await self._basic(request.headers.get("Authorization", ""), host)
            session.mechanism = "BASIC"
        return session

    async def _basic(self, header: str, host: str) -> Principal:
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic" or not encoded:
            raise unauthorized("authentication required (HTTP Basic)")
        try:
            name, sep, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise unauthorized("malformed HTTP Basic credentials") from None
        if not sep or not name:
            raise unauthorized("malformed HTTP Basic credentials")
        if await self._check(name, password, host):
            self.broker.metrics.authentications.labels(self.listener.name, "BASIC", "success").inc()
            return user(name)
        self.broker.metrics.authentications.labels(self.listener.name, "BASIC", "failure").inc()
        raise unauthorized("Authentication failed: Invalid username or password")

    async def _check(self, name: str, password: str, host: str) -> bool:
        expected = self.plain_users.get(name)
        if expected is not None:
            return hmac.compare_digest(expected.encode(), password.encode())
        guard = self.broker.security.login_guard
        digest = hashlib.sha256(password.encode()).digest()
        for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            credential = self.broker.security.credentials(name, mechanism)
            if credential is None:
                continue
            key = (name, mechanism, digest)
            if self._verified.get(key) == credential:
                return True
            try:
                async with guard.attempt(name, host, costly=True):
                    ok = await guard.hash(verify_password, credential, password)
                    if not ok:
                        guard.failed(name, host)
            except TooManyAttempts:
                raise RestError(429, 42901, "too many authentication attempts for this user name or from this "
                                            "address; retry later") from None
            if ok:
                if len(self._verified) > 10_000:
                    self._verified.clear()
                self._verified[key] = credential
            return ok
        guard.failed(name, host)
        return False
