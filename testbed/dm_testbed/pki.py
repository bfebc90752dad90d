"""Certificates and keys for the control plane: one CA, the API server's serving certificate,
client certificates per component, and the ServiceAccount signing key."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=30)


@dataclass(frozen=True)
class CertPaths:
    cert: Path
    key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


class Pki:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca = CertPaths(directory / "ca.crt", directory / "ca.key")
        self._ca_key: ec.EllipticCurvePrivateKey | None = None
        self._ca_cert: x509.Certificate | None = None

    def create_ca(self) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder().subject_name(_name("dm-testbed-ca")).issuer_name(_name("dm-testbed-ca"))
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False, encipher_only=False,
                                             decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        _write_key(self.ca.key, key)
        self.ca.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self._ca_key, self._ca_cert = key, cert

    def issue(self, name: str, common_name: str, organization: str | None = None, *, server: bool = False,
              dns: list[str] = (), ips: list[str] = ()) -> CertPaths:
        assert self._ca_key is not None and self._ca_cert is not None, "create_ca first"
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usage = [ExtendedKeyUsageOID.SERVER_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = (x509.CertificateBuilder().subject_name(_name(common_name, organization))
                   .issuer_name(self._ca_cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage(usage), critical=False))
        if dns or ips:
            names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
            names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())
        paths = CertPaths(self.dir / f"{name}.crt", self.dir / f"{name}.key")
        _write_key(paths.key, key)
        paths.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return paths

    def service_account_key(self) -> CertPaths:
        """RSA key pair the API server verifies and the controller-manager signs tokens with."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        paths = CertPaths(self.dir / "sa.pub", self.dir / "sa.key")
        _write_key(paths.key, key)
        paths.cert.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                             serialization.PublicFormat.SubjectPublicKeyInfo))
        return paths
