"""A real Kubernetes control plane for tests that need an API server but no nodes: etcd,
kube-apiserver and kube-controller-manager (garbage collection, StatefulSets, namespaces, service
account tokens) as child processes, with certificates, kubeconfigs and readiness checks. Nothing runs
pods here: that is kind's job (scripts/kind/)."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from .kubeconfig import write_kubeconfig
from .pki import CertPaths, Pki
from .processes import spawn, terminate
from .settings import TestbedSettings

log = logging.getLogger(__name__)

ADMISSION_PLUGINS = ",".join([
    "NamespaceLifecycle", "LimitRanger", "ServiceAccount", "TaintNodesByCondition", "Priority",
    "DefaultTolerationSeconds", "DefaultStorageClass", "StorageObjectInUseProtection",
    "PersistentVolumeClaimResize", "RuntimeClass", "CertificateApproval", "CertificateSigning",
    "CertificateSubjectRestriction", "DefaultIngressClass", "MutatingAdmissionWebhook",
    "ValidatingAdmissionWebhook", "ResourceQuota",
])
# Controllers that need a cloud, nodes or bootstrap tokens are left out.
CONTROLLERS = "*,-nodeipam,-ttl,-bootstrapsigner,-tokencleaner,-cloud-node-lifecycle,-route,-service"


class ControlPlaneError(RuntimeError):
    pass


@dataclass
class Credentials:
    ca: Path
    admin: CertPaths
    admin_kubeconfig: Path
    server: str


@dataclass
class ControlPlane:
    settings: TestbedSettings
    procs: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)
    credentials: Credentials | None = None
    timings: dict[str, float] = field(default_factory=dict)  # seconds until each component was ready

    @property
    def logs(self) -> Path:
        return self.settings.run_dir / "logs"

    def binary(self, name: str) -> str:
        path = self.settings.bin_dir / name
        if not path.exists():
            raise ControlPlaneError(f"{path} is missing: build the control plane first (scripts/k8s-build.sh)")
        return str(path)

    def make_credentials(self) -> Credentials:
        s = self.settings
        pki = Pki(s.run_dir / "pki")
        pki.create_ca()
        domain = s.cluster_domain
        apiserver = pki.issue("apiserver", "kube-apiserver", server=True,
                              dns=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                                   f"kubernetes.default.svc.{domain}"],
                              ips=["127.0.0.1"])
        admin = pki.issue("admin", "dm-testbed-admin", "system:masters")
        cm = pki.issue("controller-manager", "system:kube-controller-manager")
        pki.service_account_key()
        server = f"https://127.0.0.1:{s.apiserver_port}"
        write_kubeconfig(s.run_dir / "controller-manager.kubeconfig", server, pki.ca.cert, cm,
                         "system:kube-controller-manager")
        admin_kc = write_kubeconfig(s.kubeconfig, server, pki.ca.cert, admin, "dm-testbed-admin")
        self._apiserver_cert = apiserver
        self.credentials = Credentials(pki.ca.cert, admin, admin_kc, server)
        return self.credentials

    async def start(self) -> Credentials:
        s = self.settings
        t0 = time.monotonic()
        creds = self.make_credentials()
        self.timings["certificates"] = round(time.monotonic() - t0, 2)
        pki = s.run_dir / "pki"
        etcd_dir = s.run_dir / "etcd"
        etcd_url = f"http://127.0.0.1:{s.etcd_port}"
        self.procs["etcd"] = await spawn([
            "etcd", "--name", "dm-testbed", "--data-dir", str(etcd_dir),
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{s.etcd_port + 1}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{s.etcd_port + 1}",
            "--initial-cluster", f"dm-testbed=http://127.0.0.1:{s.etcd_port + 1}",
            # Test data: losing it in a host crash is fine, fsync latency on every write is not.
            "--unsafe-no-fsync", "--logger", "zap",
        ], self.logs / "etcd.log")
        await self._wait_http(f"{etcd_url}/health", "etcd", 20)
        self.timings["etcd"] = round(time.monotonic() - t0, 2)

        issuer = f"https://kubernetes.default.svc.{s.cluster_domain}"
        self.procs["kube-apiserver"] = await spawn([
            self.binary("kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1", f"--secure-port={s.apiserver_port}", "--advertise-address=127.0.0.1",
            # No node reaches this API server through a Service: no endpoints to keep for it.
            "--endpoint-reconciler-type=none", "--insecure-port=0",
            f"--tls-cert-file={self._apiserver_cert.cert}", f"--tls-private-key-file={self._apiserver_cert.key}",
            f"--client-ca-file={creds.ca}", f"--cert-dir={pki}",
            "--authorization-mode=RBAC", f"--enable-admission-plugins={ADMISSION_PLUGINS}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-account-issuer={issuer}", f"--api-audiences={issuer}",
            f"--service-cluster-ip-range={s.service_cidr}",
            "--allow-privileged=true", "--profiling=false",
            # Projected, audience-bound ServiceAccount tokens, as every current Kubernetes mounts them.
            "--feature-gates=BoundServiceAccountTokenVolume=true",
        ], self.logs / "kube-apiserver.log")
        await self._wait_http(f"{creds.server}/readyz", "kube-apiserver", 60, tls=True)
        self.timings["kube-apiserver"] = round(time.monotonic() - t0, 2)

        common = ["--leader-elect=false", "--bind-address=127.0.0.1", "--port=0"]
        cm_kc = s.run_dir / "controller-manager.kubeconfig"
        self.procs["kube-controller-manager"] = await spawn([
            self.binary("kube-controller-manager"), *common, f"--secure-port={s.apiserver_port + 1}",
            f"--kubeconfig={cm_kc}", f"--authentication-kubeconfig={cm_kc}", f"--authorization-kubeconfig={cm_kc}",
            f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={creds.ca}",
            "--use-service-account-credentials=true", f"--controllers={CONTROLLERS}",
            f"--cluster-signing-cert-file={creds.ca}", f"--cluster-signing-key-file={pki / 'ca.key'}",
        ], self.logs / "kube-controller-manager.log")
        await self._wait_http(f"https://127.0.0.1:{s.apiserver_port + 1}/healthz", "kube-controller-manager", 30,
                              tls=True, verify=False)
        self.timings["controllers"] = round(time.monotonic() - t0, 2)
        return creds

    def ssl_context(self, verify: bool = True) -> ssl.SSLContext:
        assert self.credentials is not None
        ctx = ssl.create_default_context(cafile=str(self.credentials.ca))
        ctx.load_cert_chain(str(self.credentials.admin.cert), str(self.credentials.admin.key))
        if not verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    async def _wait_http(self, url: str, name: str, timeout_s: float, tls: bool = False, verify: bool = True) -> None:
        deadline = time.monotonic() + timeout_s
        ssl_ctx = self.ssl_context(verify) if tls else None
        last = ""
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                proc = self.procs.get(name)
                if proc is not None and proc.returncode is not None:
                    raise ControlPlaneError(f"{name} exited with {proc.returncode}: {self._tail(name)}")
                try:
                    async with session.get(url, ssl=ssl_ctx if tls else None,
                                           timeout=aiohttp.ClientTimeout(total=2)) as resp:
                        if resp.status == 200:
                            return
                        last = f"HTTP {resp.status}: {(await resp.text())[:300]}"
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    last = str(exc)
                await asyncio.sleep(0.1)
        raise ControlPlaneError(f"{name} did not become ready in {timeout_s:.0f}s ({last}): {self._tail(name)}")

    def _tail(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        try:
            return path.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    async def stop(self) -> None:
        # Reverse start order: the controller-manager first, etcd last.
        for name in reversed(list(self.procs)):
            await terminate(self.procs[name], 5)
        self.procs.clear()
