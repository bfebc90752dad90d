"""Where the e2e scenarios run: the testbed (a real control plane with pods as processes; default)
or kind (DM_E2E_SUBSTRATE=kind, a kind cluster with the real image loaded; `make e2e-kind`). Only
this module differs between the two; the scenarios talk to either through kubectl and helm."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

REPO = Path(__file__).resolve().parents[2]
KIND_CLUSTER = os.environ.get("DM_KIND_CLUSTER", "dm-e2e")
KIND_IMAGE = os.environ.get("DM_KIND_IMAGE", "dm:e2e")


class Chaos(Protocol):
    """Faults only the testbed can inject (kind has no socket for them)."""

    def kill_container(self, namespace: str, pod: str, container: str | None = None, sig: int = 9) -> dict: ...
    def cut_network(self, namespace: str, pod: str) -> dict: ...
    def heal_network(self, namespace: str, pod: str) -> dict: ...


@dataclass
class Substrate:
    name: str
    kubeconfig: Path
    bin_dirs: list[Path]
    image_repository: str
    image_tag: str
    chaos: Chaos | None = None

    @property
    def image(self) -> str:
        return f"{self.image_repository}:{self.image_tag}"

    def env(self) -> dict[str, str]:
        path = os.pathsep.join([*map(str, self.bin_dirs), os.environ.get("PATH", "")])
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PATH": path}

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


def kind_unavailable() -> str | None:
    for tool in ("docker", "kind", "kubectl", "helm"):
        if not shutil.which(tool):
            return f"kind substrate: {tool} is not installed"
    if subprocess.run(["docker", "info"], capture_output=True, check=False).returncode != 0:
        return "kind substrate: no Docker engine is running"
    clusters = subprocess.run(["kind", "get", "clusters"], capture_output=True, text=True, check=False).stdout.split()
    if KIND_CLUSTER not in clusters:
        return f"kind substrate: no kind cluster {KIND_CLUSTER!r} (make e2e-kind creates it and loads the image)"
    return None


def kind_substrate(workdir: Path) -> Substrate:
    kubeconfig = workdir / "kind.kubeconfig"
    out = subprocess.run(["kind", "get", "kubeconfig", "--name", KIND_CLUSTER], capture_output=True, text=True,
                         check=True).stdout
    kubeconfig.write_text(out)
    repository, _, tag = KIND_IMAGE.rpartition(":")
    return Substrate("kind", kubeconfig, [], repository, tag)


def testbed_substrate(tb) -> Substrate:
    # Any image whose repository ends in `dm` runs from the project's virtualenv on the testbed.
    return Substrate("testbed", tb.kubeconfig, [tb.settings.bin_dir], "ghcr.io/dm-dev/dm", "dev", chaos=tb)


def served(sub: Substrate, group_version: str) -> bool:
    out = sub.kubectl("api-versions").stdout.split()
    return group_version in out


def json_of(result: subprocess.CompletedProcess[str]) -> dict:
    return json.loads(result.stdout)
