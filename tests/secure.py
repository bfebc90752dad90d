"""Certificates and secured brokers for the security tests: a CA, broker and client certificates as
PEM files (dm's own PKI module makes them), and a broker with several listeners."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path

from dm_broker.security import pki
from harness import BrokerProcess, free_port

DAY = datetime.timedelta(days=1)


@dataclass
class Pki:
    """A CA and what it signed, written under `directory`."""

    directory: Path
    ca: pki.KeyPair = field(init=False)

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ca = pki.new_ca("CN=dm-test-ca,O=dm", 30 * DAY)
        self.write("ca.pem", self.ca.cert_pem)

    def write(self, name: str, text: str) -> Path:
        path = self.directory / name
        path.write_text(text)
        return path

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    def server(self, name: str = "broker", validity: datetime.timedelta = 30 * DAY) -> Path:
        """A broker certificate for 127.0.0.1/localhost: key and chain in one PEM file."""
        pair = pki.issue(self.ca, f"CN={name},O=dm", validity, dns_names=["localhost"], ip_addresses=["127.0.0.1"])
        return self.write(f"{name}.pem", pair.key_pem + pair.cert_pem)

    def client(self, subject: str, validity: datetime.timedelta = 30 * DAY,
               not_before: datetime.datetime | None = None) -> tuple[Path, Path]:
        """(certificate file, key file) of a client certificate."""
        pair = pki.issue(self.ca, subject, validity, server=False, not_before=not_before)
        stem = subject.split(",")[0].split("=")[-1]
        return self.write(f"{stem}.crt", pair.cert_pem), self.write(f"{stem}.key", pair.key_pem)


def add_scram_users(bootstrap: str, passwords: dict[str, str],
                    mechanisms: tuple[str, ...] = ("SCRAM-SHA-256", "SCRAM-SHA-512"),
                    client_config: dict[str, str] | None = None) -> None:
    """SCRAM credentials for each user and mechanism, made through AlterUserScramCredentials (KIP-554)."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient({"bootstrap.servers": bootstrap, **(client_config or {})})  # alive until the futures end
    upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism[m.replace("-", "_")], 4096),
                                            password.encode())
               for user, password in passwords.items() for m in mechanisms]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(15)


def secure_broker(data_dir: Path, listeners: dict[str, str], overrides: dict[str, object] | None = None,
                  **kwargs: object) -> tuple[BrokerProcess, dict[str, int]]:
    """A broker with one listener per entry (name -> security protocol); PLAINTEXT must be one of them
    (the harness checks readiness and shuts down through it). Returns it and the ports by name."""
    ports = {name: free_port() for name in listeners}
    config = {
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "listener.security.protocol.map": ",".join(f"{name}:{proto}" for name, proto in listeners.items()),
        "inter.broker.listener.name": "PLAINTEXT",
        **(overrides or {}),
    }
    broker = BrokerProcess(data_dir, config, **kwargs)  # type: ignore[arg-type]
    broker.port = ports["PLAINTEXT"]
    return broker, ports
