"""Certificate authorities and certificates in PEM (no I/O): what the operator's cluster and clients
CAs issue, and what tests use. ECDSA P-256 keys, SHA-256 signatures."""

from __future__ import annotations

import datetime
import functools
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class KeyPair:
    key_pem: str
    cert_pem: str

    @functools.cached_property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem.encode())

    @property
    def not_after(self) -> datetime.datetime:
        return self.certificate.not_valid_after_utc

    @property
    def not_before(self) -> datetime.datetime:
        return self.certificate.not_valid_before_utc

    def _key(self) -> ec.EllipticCurvePrivateKey:
        return _load_key(self.key_pem)


def _load_key(pem: str) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(pem.encode(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return key


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _name(text: str) -> x509.Name:
    """`CN=app,O=example` or a bare common name."""
    if "=" not in text:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])
    return x509.Name.from_rfc4514_string(text)


def _pem(key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> KeyPair:
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    return KeyPair(key_pem, cert.public_bytes(serialization.Encoding.PEM).decode())


def skew(validity: datetime.timedelta) -> datetime.timedelta:
    """How far before now a certificate starts: for clocks a little behind, without eating a short
    validity (tests use minutes)."""
    return min(datetime.timedelta(minutes=5), validity / 10)


def new_ca(subject: str | x509.Name, validity: datetime.timedelta, not_before: datetime.datetime | None = None,
           key_pem: str | None = None) -> KeyPair:
    """A self-signed CA; with `key_pem`, a new certificate for that key (a renewal: what the CA signed
    verifies against either certificate)."""
    key = _load_key(key_pem) if key_pem else ec.generate_private_key(ec.SECP256R1())
    start = (not_before or _now()) - skew(validity)
    name = subject if isinstance(subject, x509.Name) else _name(subject)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(start + validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return _pem(key, cert)


def issue(ca: KeyPair, subject: str, validity: datetime.timedelta, dns_names: list[str] = (),  # type: ignore[assignment]
          ip_addresses: list[str] = (), server: bool = True, client: bool = True,  # type: ignore[assignment]
          not_before: datetime.datetime | None = None) -> KeyPair:
    """A certificate signed by `ca`, for a server (with its DNS names and addresses), a client, or both."""
    key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = ca.certificate
    start = (not_before or _now()) - skew(validity)
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
    usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(min(start + validity, ca_cert.not_valid_after_utc))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
                              critical=False))
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return _pem(key, builder.sign(ca._key(), hashes.SHA256()))


def remaining(pair: KeyPair, now: datetime.datetime | None = None) -> datetime.timedelta:
    return pair.not_after - (now or _now())


def signed_by(pair: KeyPair, ca: KeyPair) -> bool:
    """Whether `pair`'s certificate was issued by `ca` (same issuer name and key)."""
    cert, ca_cert = pair.certificate, ca.certificate
    if cert.issuer != ca_cert.subject:
        return False
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, Exception):  # cryptography raises InvalidSignature, ValueError or TypeError
        return False
    return True
