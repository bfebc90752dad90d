"""SCRAM credentials (RFC 5802/7677) as Kafka stores them, and the server side of an exchange.

A credential is (salt, stored key, server key, iterations): enough to verify a client's proof and to
prove the server knows it, never the password. KIP-554's AlterUserScramCredentials sends the salted
password, from which both keys are derived here. The exchange itself is `scramp`'s.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

from pydantic import BaseModel, ConfigDict

MECHANISMS = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
MECHANISM_IDS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}  # KIP-554's ScramMechanism
MIN_ITERATIONS = 4096  # Kafka's bounds for AlterUserScramCredentials
MAX_ITERATIONS = 16384


class ScramCredential(BaseModel):
    model_config = ConfigDict(frozen=True)
    mechanism: str
    salt: str  # base64
    stored_key: str  # base64
    server_key: str  # base64
    iterations: int

    def raw(self) -> tuple[bytes, bytes, bytes, int]:
        return (base64.b64decode(self.salt), base64.b64decode(self.stored_key), base64.b64decode(self.server_key),
                self.iterations)


def _hmac(mechanism: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, MECHANISMS[mechanism]).digest()


def from_salted_password(mechanism: str, salt: bytes, salted_password: bytes, iterations: int) -> ScramCredential:
    client_key = _hmac(mechanism, salted_password, b"Client Key")
    stored_key = MECHANISMS[mechanism](client_key).digest()
    server_key = _hmac(mechanism, salted_password, b"Server Key")
    enc = base64.b64encode
    return ScramCredential(mechanism=mechanism, salt=enc(salt).decode(), stored_key=enc(stored_key).decode(),
                           server_key=enc(server_key).decode(), iterations=iterations)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism]().name, password.encode(), salt, iterations)


def from_password(mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
                  salt: bytes | None = None) -> ScramCredential:
    salt = os.urandom(32) if salt is None else salt
    return from_salted_password(mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations)


def verify_password(credential: ScramCredential, password: str) -> bool:
    """Whether `password` is the one `credential` was made from (SASL/PLAIN against SCRAM users)."""
    salt, stored_key, _, iterations = credential.raw()
    candidate = from_salted_password(credential.mechanism, salt,
                                     salted_password(credential.mechanism, password, salt, iterations), iterations)
    return hmac.compare_digest(base64.b64decode(candidate.stored_key), stored_key)
