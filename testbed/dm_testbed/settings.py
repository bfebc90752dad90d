"""Where the testbed keeps things and which ports its control plane listens on (one pydantic model)."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, Field

K8S_VERSION = "v1.20.2"


def default_cache() -> Path:
    explicit = os.environ.get("DM_TESTBED_CACHE")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))) / "dm-testbed"


class TestbedSettings(BaseModel):
    """Everything is overridable through DM_TESTBED_* variables (see `from_env`)."""

    __test__ = False  # not a pytest test class

    cache_dir: Path = Field(default_factory=default_cache)
    run_dir: Path = Path("/tmp/dm-testbed")
    apiserver_port: int = 16443
    etcd_port: int = 12379
    service_cidr: str = "10.96.0.0/16"
    cluster_domain: str = "cluster.local"

    @classmethod
    def from_env(cls) -> TestbedSettings:
        whole = os.environ.get("DM_TESTBED_SETTINGS")  # how a starting process hands its settings down
        if whole:
            return cls.model_validate_json(whole)
        values: dict[str, object] = {}
        for name in cls.model_fields:
            env = os.environ.get(f"DM_TESTBED_{name.upper()}")
            if env is not None:
                values[name] = env
        return cls.model_validate(values)

    @property
    def bin_dir(self) -> Path:
        return self.cache_dir / f"kubernetes-{K8S_VERSION}" / "bin"

    @property
    def kubeconfig(self) -> Path:
        return self.run_dir / "kubeconfig"

    @property
    def state_file(self) -> Path:
        return self.run_dir / "state.json"
