"""Who an HTTP request comes from: an mTLS client certificate (mapped like a Kafka listener's), HTTP Basic
checked as a SASL/PLAIN login would be (the listener's PlainLoginModule users, then the cluster's SCRAM
credentials, through the broker's login guard), or ANONYMOUS without authentication."""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING

from aiohttp import web

from ...security.jaas import parse_jaas
from ...security.listeners import Listener
from ...security.principal import Principal
from ...security.sasl import AuthenticationFailed, Authenticator, SaslSettings
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
        self.sasl = SaslSettings(["PLAIN"], parse_jaas(jaas).users if jaas else {}, broker.security.credentials)

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
        # the same check as a SASL/PLAIN login on a Kafka listener, with its login guard
        authenticator = Authenticator(self.sasl, host, self.broker.security.login_guard)
        authenticator.handshake("PLAIN")
        try:
            await authenticator.step(b"\0" + name.encode() + b"\0" + password.encode())
        except AuthenticationFailed as exc:
            self.broker.metrics.authentications.labels(self.listener.name, "BASIC", "failure").inc()
            raise unauthorized(str(exc)) from None
        self.broker.metrics.authentications.labels(self.listener.name, "BASIC", "success").inc()
        assert authenticator.principal is not None
        return authenticator.principal
