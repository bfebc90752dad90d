"""The Secrets of a secured DMCluster — the cluster CA and clients CA (key and certificate, and the
trust bundle clients read), the brokers' certificate — kept current: made, renewed before expiry,
expired CA certificates dropped from the bundles. Decisions are certificates.py's; this reads the
Secrets from the watch cache (an idle pass reads nothing from the API server) and writes them as
children of the DMCluster."""

from __future__ import annotations

import base64
import datetime
import logging
import time
from dataclasses import dataclass, field

from dm_broker.security import pki

from . import certificates, naming
from .children import Children
from .events import EventRecorder
from .kube import Kube
from .models import CertificateAuthoritySpec, DMClusterSpec
from .objects import Obj

log = logging.getLogger(__name__)
BYO_REFRESH_S = 60.0  # a CA the user brings is not labelled as ours (not in the watch cache): read this often


def decoded(secret: Obj | None, key: str) -> str:
    if secret is None:
        return ""
    raw = (secret.get("data") or {}).get(key)
    return base64.b64decode(raw).decode() if raw else ""


def secret(name: str, namespace: str, cluster: str, owner: Obj, data: dict[str, str], component: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace, "labels": naming.labels(cluster, component),
                         "ownerReferences": [owner]},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


@dataclass
class TlsState:
    """What a pass found or made: what the brokers' and Users' certificates are signed with."""

    cluster_ca: pki.KeyPair | None = None
    clients_ca: pki.KeyPair | None = None
    cluster_bundle: str = ""
    broker_expires: datetime.datetime | None = None
    broker_fingerprint: str = ""  # SHA-256 of the brokers' current certificate
    problems: list[str] = field(default_factory=list)
    next_due: datetime.datetime | None = None  # the next renewal, so the runtime wakes for it

    def status(self) -> dict:
        def iso(t: datetime.datetime | None) -> str | None:
            return t.isoformat() if t else None

        return {"clusterCaExpires": iso(self.cluster_ca.not_after if self.cluster_ca else None),
                "clientsCaExpires": iso(self.clients_ca.not_after if self.clients_ca else None),
                "brokerCertificateExpires": iso(self.broker_expires),
                "brokerCertificate": certificates.short(self.broker_fingerprint) or None}


class TlsSecrets:
    def __init__(self, kube: Kube, children: Children, recorder: EventRecorder, namespace: str, cluster: str,
                 domain: str) -> None:
        self.kube = kube
        self.children = children
        self.recorder = recorder
        self.namespace = namespace
        self.cluster = cluster
        self.domain = domain
        self._byo: dict[str, tuple[float, Obj | None]] = {}

    async def _secret(self, name: str) -> Obj | None:
        return await self.children.cache.get("v1", "Secret", "secrets", self.namespace, name, naming.MANAGED)

    async def _byo_secret(self, name: str) -> Obj | None:
        at, obj = self._byo.get(name, (0.0, None))
        if time.monotonic() - at > BYO_REFRESH_S:
            obj = await self.kube.get_or_none(f"/api/v1/namespaces/{self.namespace}/secrets/{name}")
            self._byo[name] = (time.monotonic(), obj)
        return obj

    async def reconcile(self, spec: DMClusterSpec, owner: Obj) -> TlsState:
        state = TlsState()
        state.cluster_ca, state.cluster_bundle = await self._ca(spec.clusterCa, naming.cluster_ca(self.cluster),
                                                                naming.cluster_ca_cert(self.cluster),
                                                                f"CN={self.cluster}-cluster-ca,O=dm.dev", owner, state)
        state.clients_ca, _ = await self._ca(spec.clientsCa, naming.clients_ca(self.cluster),
                                             naming.clients_ca_cert(self.cluster),
                                             f"CN={self.cluster}-clients-ca,O=dm.dev", owner, state)
        if state.cluster_ca is not None:
            await self._broker_certificate(spec, state, owner)
        return state

    async def _ca(self, ca_spec: CertificateAuthoritySpec, name: str, cert_name: str, subject: str, owner: Obj,
                  state: TlsState) -> tuple[pki.KeyPair | None, str]:
        generate = ca_spec.generateCertificateAuthority
        live = await (self._secret(name) if generate else self._byo_secret(name))
        key, cert = decoded(live, "ca.key"), decoded(live, "ca.crt")
        current = None
        if key and cert:
            certs = certificates.certificates_in(cert)
            current = pki.KeyPair(key, certificates.pem_of(certs[0])) if certs else None
        bundle_secret = await self._secret(cert_name)
        validity, renew = certificates.duration(ca_spec.validity), certificates.duration(ca_spec.renewBefore)
        decision = certificates.plan_ca(current, decoded(bundle_secret, "ca.crt"), subject, generate, validity, renew)
        if decision is None:
            state.problems.append(f"Secret {name} with ca.crt and ca.key is missing (generateCertificateAuthority "
                                  "is false: the CA is yours to provide)")
            return None, ""
        ca = decision.ca
        if generate and (decision.reason in ("created", "renewed") or live is None):
            await self.children.apply(secret(name, self.namespace, self.cluster, owner,
                                             {"ca.key": ca.pair.key_pem, "ca.crt": ca.pair.cert_pem}, "ca"))
        if decision.changed or bundle_secret is None:
            await self.children.apply(secret(cert_name, self.namespace, self.cluster, owner,
                                             {"ca.crt": ca.bundle_pem}, "ca"))
        if decision.reason in ("created", "renewed"):
            what = "cluster" if name == naming.cluster_ca(self.cluster) else "clients"
            message = f"{what} CA {decision.reason}, valid until {ca.pair.not_after.isoformat()}"
            log.info("%s/%s: %s", self.namespace, self.cluster, message)
            self.recorder.record("CertificateAuthority" + decision.reason.capitalize(), message)
        if not generate and certificates.due(ca.pair.not_after, renew):
            state.problems.append(f"the CA in Secret {name} expires at {ca.pair.not_after.isoformat()}: renew it")
        self._due(state, ca.pair.not_after - renew if generate else None)
        return ca.pair, ca.bundle_pem

    async def _broker_certificate(self, spec: DMClusterSpec, state: TlsState, owner: Obj) -> None:
        assert state.cluster_ca is not None
        name = naming.broker_certs(self.cluster)
        live = await self._secret(name)
        pem = decoded(live, "broker.pem")
        validity, renew = certificates.duration(spec.clusterCa.validity), certificates.duration(
            spec.clusterCa.renewBefore)
        names = certificates.broker_names(self.cluster, self.namespace, self.domain)
        why = certificates.needs_issue(pem, state.cluster_ca, renew, names)
        if why is not None:
            pair = certificates.issue_broker(state.cluster_ca, self.cluster, self.namespace, self.domain, validity)
            pem = pair.key_pem + pair.cert_pem + state.cluster_ca.cert_pem
            await self.children.apply(secret(name, self.namespace, self.cluster, owner, {"broker.pem": pem}, "broker"))
            message = f"brokers' certificate issued ({why}), valid until {pair.not_after.isoformat()}"
            log.info("%s/%s: %s", self.namespace, self.cluster, message)
            if why != "missing":
                self.recorder.record("CertificateRenewed", message)
        cert = certificates.certificates_in(pem)[0]
        state.broker_expires = cert.not_valid_after_utc
        state.broker_fingerprint = certificates.fingerprint(cert)
        self._due(state, cert.not_valid_after_utc - renew)

    @staticmethod
    def _due(state: TlsState, at: datetime.datetime | None) -> None:
        if at is not None and (state.next_due is None or at < state.next_due):
            state.next_due = at
