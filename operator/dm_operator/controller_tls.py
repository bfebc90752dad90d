"""The controller API over TLS for secured clusters (issue 30, ADR 0027).

The operator hosts every cluster's controller behind one port. For a DMCluster with any secured
listener it also serves that API on a TLS port, answering each cluster with a certificate its own
cluster CA signed for the name `controller.<cluster>.<namespace>.dm` (the brokers send that name as
SNI and verify the certificate against the cluster CA they already mount). One cluster's brokers so
trust only their own CA, and nothing new is stored: the certificates live in the operator's memory,
issued again when an operator takes over, when the cluster CA changes, and before they expire. OpenSSL
loads a key only from a file, so each is written to a private temporary directory for that moment and
removed with it: no private key stays behind on the operator's disk."""

from __future__ import annotations

import datetime
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dm_broker.security import pki

VALIDITY = datetime.timedelta(days=30)
RENEW_BEFORE = datetime.timedelta(days=10)


def server_name(namespace: str, cluster: str) -> str:
    return f"controller.{cluster}.{namespace}.dm"


@dataclass
class _Issued:
    ca_pem: str
    not_after: datetime.datetime
    context: ssl.SSLContext


class ControllerTls:
    def __init__(self) -> None:
        self._issued: dict[str, _Issued] = {}
        # No certificate of its own: a client that names no cluster this operator serves (or no name
        # at all) fails the handshake.
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.sni_callback = self._pick

    def install(self, namespace: str, cluster: str, ca: pki.KeyPair,
                now: datetime.datetime | None = None) -> bool:
        """Makes sure the cluster is answered with a current certificate of `ca`; True when one was issued."""
        name = server_name(namespace, cluster)
        now = now or datetime.datetime.now(datetime.UTC)
        current = self._issued.get(name)
        if current is not None and current.ca_pem == ca.cert_pem and current.not_after - RENEW_BEFORE > now:
            return False
        pair = pki.issue(ca, f"CN={name},O=dm.dev", VALIDITY, dns_names=[name], client=False)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        with tempfile.TemporaryDirectory(prefix="dm-controller-tls-") as private:  # mode 0700
            path = Path(private) / "chain.pem"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(pair.key_pem + pair.cert_pem + ca.cert_pem)
            context.load_cert_chain(path)
        self._issued[name] = _Issued(ca.cert_pem, pair.not_after, context)
        return True

    def remove(self, namespace: str, cluster: str) -> None:
        name = server_name(namespace, cluster)
        self._issued.pop(name, None)

    def _pick(self, connection: ssl.SSLObject, name: str | None, _default: ssl.SSLContext) -> int | None:
        issued = self._issued.get(name or "")
        if issued is None:
            return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
        connection.context = issued.context
        return None
