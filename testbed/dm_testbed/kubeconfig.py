"""Kubeconfig files for the admin user and the control-plane components."""

from __future__ import annotations

from pathlib import Path

import yaml

from .pki import CertPaths


def write_kubeconfig(path: Path, server: str, ca: Path, client: CertPaths, user: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "dm-testbed", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(client.cert), "client-key": str(client.key)}}],
        "contexts": [{"name": "dm-testbed", "context": {"cluster": "dm-testbed", "user": user,
                                                        "namespace": "default"}}],
        "current-context": "dm-testbed",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
