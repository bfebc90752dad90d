"""Where the testbed keeps things and how its networks are laid out (one pydantic model)."""

from __future__ import annotations

import ipaddress
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
    nodes: int = Field(3, ge=1, le=20)
    zones: list[str] = ["zone-a", "zone-b", "zone-c"]
    node_cpu: str = "4"
    node_memory: str = "8Gi"
    node_pods: int = 110
    apiserver_port: int = 16443
    etcd_port: int = 12379
    kubelet_port: int = 10250  # node i serves its kubelet API on kubelet_port + i
    bridge: str = "dmtb0"
    pod_cidr: str = "10.244.0.0/16"
    service_cidr: str = "10.96.0.0/16"
    cluster_domain: str = "cluster.local"
    # Prefix of everything the testbed creates in the host's namespaces (netns, links), so a stale
    # run can be found and removed.
    prefix: str = "dmtb"
    # Kubelet back-off for crashed containers: Kubernetes' 10 s doubling to 300 s.
    restart_backoff_s: float = 10.0
    restart_backoff_max_s: float = 300.0

    @classmethod
    def from_env(cls) -> TestbedSettings:
        whole = os.environ.get("DM_TESTBED_SETTINGS")  # how a starting process hands its settings down
        if whole:
            return cls.model_validate_json(whole)
        values: dict[str, object] = {}
        for name in cls.model_fields:
            env = os.environ.get(f"DM_TESTBED_{name.upper()}")
            if env is not None:
                values[name] = env.split(",") if name == "zones" else env
        return cls.model_validate(values)

    @property
    def bin_dir(self) -> Path:
        return self.cache_dir / f"kubernetes-{K8S_VERSION}" / "bin"

    @property
    def gateway_ip(self) -> str:
        """The host's address on the pod bridge: DNS, services and the API server are reached here."""
        return str(next(ipaddress.ip_network(self.pod_cidr).hosts()))

    @property
    def pod_prefixlen(self) -> int:
        return ipaddress.ip_network(self.pod_cidr).prefixlen

    @property
    def kubernetes_service_ip(self) -> str:
        return str(next(ipaddress.ip_network(self.service_cidr).hosts()))

    @property
    def kubeconfig(self) -> Path:
        return self.run_dir / "kubeconfig"

    @property
    def state_file(self) -> Path:
        return self.run_dir / "state.json"

    @property
    def control_socket(self) -> Path:
        return self.run_dir / "control.sock"

    def node_name(self, index: int) -> str:
        return f"{self.prefix}-node-{index}"

    def node_zone(self, index: int) -> str:
        return self.zones[index % len(self.zones)]

    def node_pod_cidr(self, index: int) -> ipaddress.IPv4Network:
        """Node i hands out pod addresses from the (i+1)-th /24 of the pod network."""
        net = ipaddress.ip_network(self.pod_cidr)
        return list(net.subnets(new_prefix=24))[index + 1]
