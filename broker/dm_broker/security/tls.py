"""TLS contexts from Kafka's `ssl.*` properties, rebuilt when their files change.

PEM is read from files (`ssl.keystore.location`, a key and its chain in one file, or the chain
with the key in `ssl.keystore.key`) or inline (`ssl.keystore.certificate.chain` +
`ssl.keystore.key`, `ssl.truststore.certificates`); PKCS12 is converted on load. Python's ssl
module loads keys only from files, so inline and converted material goes through a private
temporary file removed right after loading.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config_error import ConfigError

if TYPE_CHECKING:
    from ..config import BrokerConfig

log = logging.getLogger(__name__)
VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
RELOAD_CHECK_S = 1.0  # how often a listener looks at its TLS files
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


@dataclass(frozen=True)
class TlsSettings:
    """The `ssl.*` properties of one listener (or of the controller link)."""

    scope: str  # for messages: the listener name, or what else these settings belong to
    keystore_type: str = "PEM"
    keystore_location: str = ""
    keystore_password: str = ""
    key_password: str = ""
    certificate_chain: str = ""
    key: str = ""
    truststore_type: str = "PEM"
    truststore_location: str = ""
    truststore_password: str = ""
    truststore_certificates: str = ""
    client_auth: str = "none"
    protocols: str = "TLSv1.2,TLSv1.3"
    cipher_suites: str = ""
    endpoint_identification: str = "https"

    @classmethod
    def for_listener(cls, config: BrokerConfig, listener: str) -> TlsSettings:
        def get(name: str) -> str:
            return str(config.for_listener(listener, name))

        return cls(scope=listener, keystore_type=get("ssl.keystore.type"),
                   keystore_location=get("ssl.keystore.location"),
                   keystore_password=get("ssl.keystore.password"), key_password=get("ssl.key.password"),
                   certificate_chain=get("ssl.keystore.certificate.chain"), key=get("ssl.keystore.key"),
                   truststore_type=get("ssl.truststore.type"), truststore_location=get("ssl.truststore.location"),
                   truststore_password=get("ssl.truststore.password"),
                   truststore_certificates=get("ssl.truststore.certificates"), client_auth=get("ssl.client.auth"),
                   protocols=get("ssl.enabled.protocols"), cipher_suites=get("ssl.cipher.suites"),
                   endpoint_identification=get("ssl.endpoint.identification.algorithm"))

    @property
    def where(self) -> str:
        return self.scope if " " in self.scope else f"listener {self.scope}"

    @property
    def has_keystore(self) -> bool:
        return bool(self.keystore_location or self.certificate_chain)

    @property
    def has_truststore(self) -> bool:
        return bool(self.truststore_location or self.truststore_certificates)

    def files(self) -> list[str]:
        return [p for p in (self.keystore_location, self.truststore_location) if p]

    def check(self, server: bool) -> None:
        """ConfigError for settings no context can be built from."""
        where = self.where
        for kind in (self.keystore_type, self.truststore_type):
            if kind == "JKS":
                raise ConfigError(f"{where}: JKS stores are not supported; use PEM, or convert with keytool "
                                  "-importkeystore -deststoretype PKCS12")
        if server and not self.has_keystore:
            raise ConfigError(f"{where}: TLS needs ssl.keystore.location or ssl.keystore.certificate.chain")
        if self.certificate_chain and not self.key:
            raise ConfigError(f"{where}: ssl.keystore.certificate.chain needs ssl.keystore.key")
        if server and self.client_auth != "none" and not self.has_truststore:
            raise ConfigError(f"{where}: ssl.client.auth={self.client_auth} needs a truststore of the CAs that sign "
                              "client certificates")
        versions = [v.strip() for v in self.protocols.split(",") if v.strip()]
        bad = [v for v in versions if v not in VERSIONS]
        if not versions or bad:
            raise ConfigError(f"{where}: ssl.enabled.protocols may list TLSv1.2 and TLSv1.3 only, got "
                              f"{self.protocols!r}")
        for path in self.files():
            if not Path(path).is_file():
                raise ConfigError(f"{where}: {path} does not exist")


@contextlib.contextmanager
def _private_file(data: bytes) -> Iterator[str]:
    fd, path = tempfile.mkstemp(prefix="dm-tls-", suffix=".pem")
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
        os.close(fd)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def read_pkcs12(path: str, password: str) -> tuple[bytes, bytes, list[bytes]]:
    """(key PEM, certificate PEM, CA certificates PEM) of a PKCS12 file."""
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
        pkcs12,
    )

    key, cert, extra = pkcs12.load_key_and_certificates(Path(path).read_bytes(), password.encode() or None)
    key_pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()) if key is not None else b""
    cert_pem = cert.public_bytes(Encoding.PEM) if cert is not None else b""
    return key_pem, cert_pem, [c.public_bytes(Encoding.PEM) for c in extra or ()]


def _load_keystore(ctx: ssl.SSLContext, s: TlsSettings) -> None:
    if s.certificate_chain:
        with _private_file(s.certificate_chain.encode()) as chain, _private_file(s.key.encode()) as key:
            ctx.load_cert_chain(chain, key, s.key_password or None)
    elif s.keystore_type == "PKCS12":
        key_pem, cert_pem, extra = read_pkcs12(s.keystore_location, s.keystore_password)
        with _private_file(cert_pem + b"".join(extra)) as chain, _private_file(key_pem) as key:
            ctx.load_cert_chain(chain, key)
    elif s.key:
        with _private_file(s.key.encode()) as key:
            ctx.load_cert_chain(s.keystore_location, key, s.key_password or None)
    else:
        ctx.load_cert_chain(s.keystore_location, None, s.key_password or None)


def _load_truststore(ctx: ssl.SSLContext, s: TlsSettings) -> None:
    if s.truststore_certificates:
        ctx.load_verify_locations(cadata=s.truststore_certificates)
    if s.truststore_location:
        if s.truststore_type == "PKCS12":
            _, cert, extra = read_pkcs12(s.truststore_location, s.truststore_password)
            ctx.load_verify_locations(cadata=(cert + b"".join(extra)).decode())
        else:
            ctx.load_verify_locations(cafile=s.truststore_location)


def _versions(ctx: ssl.SSLContext, s: TlsSettings) -> None:
    versions = sorted(VERSIONS[v.strip()] for v in s.protocols.split(",") if v.strip())
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    if s.cipher_suites:
        try:
            ctx.set_ciphers(":".join(c.strip() for c in s.cipher_suites.split(",") if c.strip()))
        except ssl.SSLError as exc:
            raise ConfigError(f"{s.where}: ssl.cipher.suites: {exc}") from None


def server_context(s: TlsSettings) -> ssl.SSLContext:
    s.check(server=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(ctx, s)
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    try:
        _load_keystore(ctx, s)
        if s.has_truststore:
            _load_truststore(ctx, s)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise ConfigError(f"{s.where}: cannot load the TLS key, certificates or CAs: {exc}") from None
    ctx.verify_mode = CLIENT_AUTH[s.client_auth]
    return ctx


def client_context(s: TlsSettings) -> ssl.SSLContext:
    """For this broker as a client (of other brokers, of the controller): the truststore verifies the
    server, the keystore (if any) is the client certificate."""
    s.check(server=False)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _versions(ctx, s)
    try:
        if s.has_truststore:
            _load_truststore(ctx, s)
        else:
            ctx.load_default_certs()
        if s.has_keystore:
            _load_keystore(ctx, s)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise ConfigError(f"{s.where}: cannot load the TLS key, certificates or CAs: {exc}") from None
    ctx.check_hostname = s.endpoint_identification.lower() == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class ReloadingContext:
    """A listener's TLS context, kept current with its files: `check()` (called every second or so)
    notices a changed key, certificate or CA file. A server context is updated in place — the
    listening socket keeps the object it was created with, and OpenSSL copies the key and chain into
    each connection when it starts, so new connections get the new material and established ones are
    untouched. CAs added to the truststore are trusted at once; one removed stays trusted until the
    broker restarts (OpenSSL cannot forget a CA; the heartbeat reports it as `retained`). A client
    context is replaced whole. A change that does not load (a file half written, a key that does not
    match its certificate) keeps the previous material and is logged."""

    def __init__(self, settings: TlsSettings, server: bool = True) -> None:
        self.settings = settings
        self.server = server
        self._build = server_context if server else client_context
        self.context = self._build(settings)
        self._signature = self._stat()
        self.reloads = 0
        self.certificate, self.trusted = fingerprints(settings)
        self.ever_trusted = set(self.trusted)  # a server context never forgets a CA it loaded
        self.not_after = not_after(settings)  # dm_certificate_expiry_seconds

    @property
    def retains_removed_cas(self) -> bool:
        """Whether it still trusts CAs no longer in its truststore (they go at the next restart)."""
        return self.server and bool(self.ever_trusted - set(self.trusted))

    def _stat(self) -> tuple:
        out = []
        for path in self.settings.files():
            try:
                st = os.stat(path)
                out.append((path, st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append((path, None))
        return tuple(out)

    async def keep_current(self) -> None:
        """check() every RELOAD_CHECK_S, for as long as the listener runs (cancel the task to stop)."""
        while True:
            await asyncio.sleep(RELOAD_CHECK_S)
            with contextlib.suppress(Exception):  # check() logs what does not load; the old material stays
                self.check()

    def check(self) -> bool:
        """Reloads what changed on disk; True when something was reloaded."""
        signature = self._stat()
        if signature == self._signature:
            return False
        previous, self._signature = self._signature, signature
        try:
            fresh = self._build(self.settings)  # everything loads together, or nothing changes
        except ConfigError as exc:
            log.error("%s; still using the previous ones", exc)
            return False
        if not self.server:
            self.context = fresh
        else:
            try:
                _load_keystore(self.context, self.settings)
                if self.settings.truststore_location and any(
                        p[0] == self.settings.truststore_location for p in set(signature) - set(previous)):
                    _load_truststore(self.context, self.settings)
            except (OSError, ssl.SSLError, ValueError) as exc:
                log.error("listener %s: reloading the TLS material failed: %s", self.settings.scope, exc)
                return False
        self.reloads += 1
        self.certificate, self.trusted = fingerprints(self.settings)
        self.ever_trusted |= set(self.trusted)
        self.not_after = not_after(self.settings)
        log.info("listener %s: TLS key/certificates reloaded from disk", self.settings.scope)
        return True


def _sha256(cert: Any) -> str:
    from cryptography.hazmat.primitives import hashes

    return cert.fingerprint(hashes.SHA256()).hex()


def _pems(data: bytes) -> list[Any]:
    from cryptography import x509

    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError:
        return []


def _presented_chain(s: TlsSettings) -> list[Any]:
    """The certificates a listener presents, its own first (OSError, ValueError when unreadable)."""
    if s.certificate_chain:
        return _pems(s.certificate_chain.encode())
    if s.keystore_type == "PKCS12" and s.keystore_location:
        return _pems(read_pkcs12(s.keystore_location, s.keystore_password)[1])
    if s.keystore_location:
        return _pems(Path(s.keystore_location).read_bytes())
    return []


def fingerprints(s: TlsSettings) -> tuple[str, list[str]]:
    """SHA-256 fingerprints of the certificate a listener presents and of the CAs it trusts (what
    brokers report, so the operator knows when a rotation step has reached every broker)."""
    certificate = ""
    try:
        chain = _presented_chain(s)
        certificate = _sha256(chain[0]) if chain else ""
        trusted = _pems(s.truststore_certificates.encode()) if s.truststore_certificates else []
        if s.truststore_location:
            data = Path(s.truststore_location).read_bytes()
            if s.truststore_type == "PKCS12":
                _, cert, extra = read_pkcs12(s.truststore_location, s.truststore_password)
                data = cert + b"".join(extra)
            trusted += _pems(data)
    except (OSError, ValueError):
        return certificate, []
    return certificate, sorted({_sha256(c) for c in trusted})


def not_after(s: TlsSettings) -> float | None:
    """When the certificate a listener presents expires (seconds since the epoch); None without one."""
    try:
        chain = _presented_chain(s)
    except (OSError, ValueError):
        return None
    return chain[0].not_valid_after_utc.timestamp() if chain else None


def peer_subject(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> str | None:
    """The client certificate's subject in RFC 2253 order (CN=...,OU=...,O=...), as Kafka writes it."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    from cryptography import x509

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()
