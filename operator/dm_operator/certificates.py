"""The cluster and clients CAs, the brokers' certificate and the Users' ones: what to issue or renew
(pure decisions over PEM material, no API calls).

A CA is renewed by a new certificate for the *same key and subject* (as Strimzi does by default):
what the new one signs verifies against the old one too, so brokers and clients that have not yet
loaded the new CA keep working, and nothing needs restarting or phasing. The trust bundle (the
`-cert` Secret's ca.crt) holds the current CA certificate and the older ones until they expire.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from dm_broker.security import pki

from . import naming
from .listeners import broker_subject

_DURATION = re.compile(r"^(\d+)([smhd])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# A certificate's dates end in 9999 (X.509) and a timedelta at 999,999,999 days: a longer duration was an
# OverflowError, which is no ValueError, so the spec was not reported invalid and every pass failed on it.
LONGEST = datetime.timedelta(days=100 * 365)


def duration(text: str) -> datetime.timedelta:
    m = _DURATION.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a duration like 8760h")
    seconds = int(m.group(1)) * _SECONDS[m.group(2)]
    if seconds > LONGEST.total_seconds():
        raise ValueError(f"{text!r} is longer than 100 years")
    return datetime.timedelta(seconds=seconds)


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def certificates_in(pem: str) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(pem.encode()) if pem.strip() else []
    except ValueError:
        return []


def fingerprint(cert: x509.Certificate) -> str:
    return cert.fingerprint(hashes.SHA256()).hex()


def short(fingerprint: str) -> str:
    """A fingerprint as the status shows it (enough to tell certificates apart)."""
    return fingerprint[:16]


def pem_of(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


@dataclass(frozen=True)
class Ca:
    """A CA as its Secret holds it, and its trust bundle."""

    pair: pki.KeyPair
    bundle: list[x509.Certificate]

    @property
    def bundle_pem(self) -> str:
        return "".join(pem_of(c) for c in self.bundle)


def renew_ca(pair: pki.KeyPair, validity: datetime.timedelta, at: datetime.datetime | None = None) -> pki.KeyPair:
    """A new certificate for the CA's own key and subject, valid from `at` for `validity`."""
    return pki.new_ca(pair.certificate.subject, validity, at, key_pem=pair.key_pem)


def due(not_after: datetime.datetime, renew_before: datetime.timedelta, at: datetime.datetime | None = None) -> bool:
    return (at or now()) >= not_after - renew_before


@dataclass(frozen=True)
class CaDecision:
    ca: Ca
    changed: bool
    reason: str = ""


def plan_ca(current: pki.KeyPair | None, bundle_pem: str, subject: str, generate: bool,
            validity: datetime.timedelta, renew_before: datetime.timedelta,
            at: datetime.datetime | None = None) -> CaDecision | None:
    """The CA after this pass: made, renewed (same key), or as it is; expired certificates leave the
    bundle. None when there is no CA and the operator may not make one (brought your own, missing)."""
    at = at or now()
    if current is None:
        if not generate:
            return None
        pair = pki.new_ca(subject, validity, at)
        return CaDecision(Ca(pair, [pair.certificate]), True, "created")
    pair, reason = current, ""
    if generate and due(pair.not_after, renew_before, at):
        pair, reason = renew_ca(pair, validity, at), "renewed"
    bundle = certificates_in(bundle_pem)
    current_print = fingerprint(pair.certificate)
    ordered = [pair.certificate] + [c for c in bundle if c.not_valid_after_utc > at and fingerprint(c) != current_print]
    changed = bool(reason) or [fingerprint(c) for c in ordered] != [fingerprint(c) for c in bundle]
    return CaDecision(Ca(pair, ordered), changed, reason or ("bundle" if changed else ""))


def broker_names(cluster: str, namespace: str, domain: str) -> list[str]:
    """The DNS names a broker certificate covers: every broker by pod name, and the bootstrap Service."""
    headless, bootstrap = naming.headless_service(cluster), naming.bootstrap_service(cluster)
    return [f"*.{headless}.{namespace}.svc.{domain}", f"*.{headless}.{namespace}.svc",
            f"{bootstrap}.{namespace}.svc.{domain}", f"{bootstrap}.{namespace}.svc", f"{bootstrap}.{namespace}",
            bootstrap]


def needs_issue(cert_pem: str, ca: pki.KeyPair, renew_before: datetime.timedelta, dns_names: list[str] | None,
                at: datetime.datetime | None = None) -> str | None:
    """Why a leaf certificate must be (re)issued by `ca`, or None."""
    certs = certificates_in(cert_pem)
    if not certs:
        return "missing"
    cert = certs[0]
    if not pki.signed_by(pki.KeyPair("", pem_of(cert)), ca):
        return "signed by another CA key"
    if due(cert.not_valid_after_utc, renew_before, at):
        return "expiring"
    if dns_names is not None:
        try:
            sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            have = set(sans.get_values_for_type(x509.DNSName))
        except x509.ExtensionNotFound:
            have = set()
        if have != set(dns_names):
            return "names changed"
    return None


def issue_broker(ca: pki.KeyPair, cluster: str, namespace: str, domain: str,
                 validity: datetime.timedelta) -> pki.KeyPair:
    return pki.issue(ca, broker_subject(cluster), validity, dns_names=broker_names(cluster, namespace, domain),
                     server=True, client=True)


def issue_user(ca: pki.KeyPair, username: str, validity: datetime.timedelta) -> pki.KeyPair:
    return pki.issue(ca, f"CN={username}", validity, server=False, client=True)
