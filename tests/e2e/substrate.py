"""Where the e2e scenarios run: a kind cluster with the dm image loaded (scripts/kind/cluster.sh
creates it; `make test` and `make e2e-kind` do that first). The scenarios talk to it through kubectl
and helm; the faults the Kubernetes API cannot cause (a container killed by its runtime, a node
stopped) go through the container engine that runs the nodes."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dm_testbed.settings import TestbedSettings
from kubeapi import ApiReader

REPO = Path(__file__).resolve().parents[2]
KIND_CLUSTER = os.environ.get("DM_KIND_CLUSTER", "dm-e2e")
IMAGE = os.environ.get("DM_IMAGE", "dm:e2e")


def tools_path() -> str:
    """PATH with the tool cache first (kind, kubectl and helm as scripts/ install them)."""
    return os.pathsep.join([str(TestbedSettings.from_env().bin_dir), os.environ.get("PATH", "")])


def run_tool(*argv: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout_s,
                          env={**os.environ, "PATH": tools_path()})


@dataclass
class Substrate:
    name: str
    kubeconfig: Path
    image_repository: str
    image_tag: str
    chaos: KindChaos = field(init=False)
    reader: ApiReader = field(init=False)

    def __post_init__(self) -> None:
        self.chaos = KindChaos(self)
        self.reader = ApiReader(self.kubeconfig)

    def get(self, *args: str) -> Any:
        """`kubectl get ARGS -o json` without a kubectl process (tests/e2e/kubeapi.py)."""
        return self.reader.get(*args)

    @property
    def image(self) -> str:
        return f"{self.image_repository}:{self.image_tag}"

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PATH": tools_path()}

    def run(self, tool: str, *args: str, input: str | None = None, check: bool = True,
            timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([tool, *args], input=input, capture_output=True, text=True, env=self.env(),
                                timeout=timeout_s, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"{tool} {' '.join(args)} failed ({result.returncode}):\n{result.stderr.strip()}")
        return result

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        return self.run("kubectl", *args, input=input, check=check, timeout_s=timeout_s)

    def helm(self, *args: str, check: bool = True, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
        return self.run("helm", *args, check=check, timeout_s=timeout_s)

    def docker(self, *args: str, check: bool = True, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        return self.run("docker", *args, check=check, timeout_s=timeout_s)


class KindChaos:
    """Faults through the container engine and the nodes' containerd: what a crashing process, an
    OOM kill or a machine going away do, below the Kubernetes API."""

    def __init__(self, sub: Substrate) -> None:
        self.sub = sub

    def kill_container(self, namespace: str, pod: str, container: str, sig: str = "SIGKILL") -> str:
        """Kills a container's main process through its node's containerd (the kubelet sees it exit
        and restarts it, as after a crash); returns the node it ran on."""
        obj = self.sub.get("pod", pod, "-n", namespace)
        status = next(s for s in obj["status"]["containerStatuses"] if s["name"] == container)
        runtime, _, container_id = status["containerID"].partition("://")
        assert runtime == "containerd", status["containerID"]
        node = obj["spec"]["nodeName"]
        self.sub.docker("exec", node, "ctr", "--namespace", "k8s.io", "task", "kill", "--signal", sig, container_id)
        return node

    def stop_node(self, node: str) -> None:
        """The node's container stopped (systemd shuts the node down; what is left is killed)."""
        self.sub.docker("stop", "--time", "10", node, timeout_s=60)

    def start_node(self, node: str) -> None:
        self.sub.docker("start", node, timeout_s=60)


def kind_unavailable() -> str | None:
    for tool in ("docker", "kind", "kubectl", "helm"):
        if not shutil.which(tool, path=tools_path()):
            return f"kind substrate: {tool} is not installed (make test installs it)"
    if run_tool("docker", "info").returncode != 0:
        return "kind substrate: no Docker engine answers (scripts/kind/engine.sh starts one)"
    if KIND_CLUSTER not in run_tool("kind", "get", "clusters").stdout.split():
        return f"kind substrate: no kind cluster {KIND_CLUSTER!r} (scripts/kind/cluster.sh up creates it)"
    return None


def kind_substrate(workdir: Path) -> Substrate:
    kubeconfig = workdir / "kind.kubeconfig"
    result = run_tool("kind", "get", "kubeconfig", "--name", KIND_CLUSTER)
    if result.returncode != 0:
        raise RuntimeError(f"kind get kubeconfig: {result.stderr}")
    kubeconfig.write_text(result.stdout)
    repository, _, tag = IMAGE.rpartition(":")
    return Substrate("kind", kubeconfig, repository, tag)
