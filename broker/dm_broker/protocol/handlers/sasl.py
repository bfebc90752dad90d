"""SaslHandshake (v0-1) and SaslAuthenticate (v0-2), and the raw tokens of a v0 handshake.

A failed authentication is answered with SASL_AUTHENTICATION_FAILED after
`connection.failed.authentication.delay.ms`, then the connection is closed; it is logged and
counted. A client re-authenticates (KIP-368) with another handshake on the same connection, as the
same principal.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import struct
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...log_limits import RateLimitedLog, shown
from ...security.sasl import AuthenticationFailed
from ...security.session import Session
from ..build import make
from ..codec import ProtocolError
from ..dispatch import RequestContext

if TYPE_CHECKING:
    from ...broker import Broker

log = logging.getLogger(__name__)
unauthenticated = RateLimitedLog(log)  # what a client that is not logged in makes the broker write
SIZE = struct.Struct(">i")
# The SASL mechanisms Kafka knows: a metric's mechanism label is one of them or "other", whatever a client names
# (3,000 handshakes naming made-up ones made 3,000 series, issue 65).
KNOWN_MECHANISMS = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER"})


def mechanism_label(mechanism: str) -> str:
    return mechanism if mechanism in KNOWN_MECHANISMS else ("unknown" if not mechanism else "other")


async def handle_sasl_handshake(ctx: RequestContext, req: Any) -> Any:
    session = ctx.session
    if session is None or session.authenticator is None:
        return make(ctx.response_cls, error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    auth = session.authenticator
    offered = tuple(auth.settings.mechanisms)
    if session.authenticated and ctx.version < 1:
        session.close_after_response = True  # re-authentication needs SaslHandshake v1 (KIP-368)
        return make(ctx.response_cls, error_code=ErrorCode.illegal_sasl_state, mechanisms=offered)
    if not auth.handshake(req.mechanism):
        unauthenticated.info("mechanism", "listener %s: %s asked for SASL mechanism %s (offered: %s)",
                             session.listener.name, session.host, shown(req.mechanism), ", ".join(offered))
        ctx.broker.metrics.authentications.labels(session.listener.name, mechanism_label(req.mechanism),
                                                  "failure").inc()
        session.close_after_response = True
        return make(ctx.response_cls, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=offered)
    session.mechanism = req.mechanism
    session.raw_tokens = ctx.version == 0
    return make(ctx.response_cls, error_code=ErrorCode.none, mechanisms=offered)


async def handle_sasl_authenticate(ctx: RequestContext, req: Any) -> Any:
    session = ctx.session
    if session is None or session.authenticator is None or session.authenticator.mechanism is None:
        if session is not None:
            session.close_after_response = True
        return _answer(ctx, ErrorCode.illegal_sasl_state, "SaslAuthenticate without a SaslHandshake first")
    try:
        token = await _step(session, bytes(req.auth_bytes))
    except AuthenticationFailed as exc:
        await _failed(ctx.broker, session, str(exc))
        return _answer(ctx, ErrorCode.sasl_authentication_failed, str(exc))
    lifetime = 0
    if session.authenticator.principal is not None:
        lifetime = _authenticated(ctx.broker, session)
        if lifetime < 0:
            message = "Cannot change principals during re-authentication"
            await _failed(ctx.broker, session, message)
            return _answer(ctx, ErrorCode.sasl_authentication_failed, message)
    return make(ctx.response_cls, error_code=ErrorCode.none, error_message=None, auth_bytes=token,
                session_lifetime=datetime.timedelta(milliseconds=lifetime))


async def raw_sasl_token(broker: Broker, session: Session, token: bytes) -> list[bytes]:
    """After SaslHandshake v0 the client sends bare tokens; the answers are bare too. A failure
    closes the connection (v0 has no way to say why)."""
    try:
        answer = await _step(session, token)
    except AuthenticationFailed as exc:
        await _failed(broker, session, str(exc))
        raise ProtocolError(f"SASL authentication failed: {exc}") from None
    if session.authenticator is not None and session.authenticator.principal is not None:
        session.raw_tokens = False
        _authenticated(broker, session)
    return [SIZE.pack(len(answer)) + answer]


async def _step(session: Session, token: bytes) -> bytes:
    assert session.authenticator is not None
    return await session.authenticator.step(token)


def _authenticated(broker: Broker, session: Session) -> int:
    """Records the principal; the session lifetime to tell the client, or -1 when a re-authentication
    changed the principal."""
    assert session.authenticator is not None
    principal = session.authenticator.principal
    assert principal is not None
    if session.authenticated and principal != session.principal:
        return -1
    first = not session.authenticated
    session.principal = principal
    session.authenticated_now()
    broker.metrics.authentications.labels(session.listener.name, mechanism_label(session.mechanism), "success").inc()
    if first:
        log.debug("listener %s: %s authenticated as %s (%s)", session.listener.name, session.host, principal,
                  session.mechanism)
    return session.start_lifetime()


async def _failed(broker: Broker, session: Session, reason: str) -> None:
    broker.metrics.authentications.labels(session.listener.name, mechanism_label(session.mechanism),
                                          "failure").inc()
    unauthenticated.warning("failed", "listener %s: authentication of %s with %s failed: %s", session.listener.name,
                            session.host, session.mechanism or "SASL", reason)
    session.close_after_response = True
    await asyncio.sleep(broker.config["connection.failed.authentication.delay.ms"] / 1000)


def _answer(ctx: RequestContext, code: ErrorCode, message: str) -> Any:
    return make(ctx.response_cls, error_code=code, error_message=message, auth_bytes=b"",
                session_lifetime=datetime.timedelta(0))
