"""Using a testbed from tests and scripts: start it (as a detached supervisor), wait until ready,
run kubectl against it, stop it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import cleanup
from .settings import TestbedSettings

TESTBED_ROOT = Path(__file__).resolve().parents[1]


class TestbedError(RuntimeError):
    pass


def why_unavailable(settings: TestbedSettings) -> str | None:
    """A reason the testbed cannot run on this machine, or None."""
    if not shutil.which("etcd"):
        return "etcd is missing (scripts/k8s-build.sh installs etcd-server)"
    missing = [b for b in ("kube-apiserver", "kube-controller-manager", "kubectl")
               if not (settings.bin_dir / b).exists()]
    if missing:
        return f"Kubernetes binaries not built ({', '.join(missing)}); run scripts/k8s-build.sh"
    return None


class Testbed:
    __test__ = False  # not a pytest test class

    def __init__(self, settings: TestbedSettings) -> None:
        self.settings = settings

    # -- lifecycle -------------------------------------------------------------------------------

    @classmethod
    def start(cls, settings: TestbedSettings | None = None, owner_pid: int | None = None,
              timeout_s: float = 120) -> Testbed:
        settings = settings or TestbedSettings.from_env()
        reason = why_unavailable(settings)
        if reason:
            raise TestbedError(reason)
        settings.run_dir.mkdir(parents=True, exist_ok=True)
        log_dir = settings.run_dir / "logs"
        log_dir.mkdir(exist_ok=True)
        env = {**os.environ, "DM_TESTBED_SETTINGS": settings.model_dump_json(),
               "PYTHONPATH": os.pathsep.join([str(TESTBED_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        argv = [sys.executable, "-m", "dm_testbed", "up", "--foreground"]
        if owner_pid:
            argv += ["--owner-pid", str(owner_pid)]
        with open(settings.run_dir / cleanup.SUPERVISOR_OUT, "wb") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env,
                                    start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = cleanup.read_state(settings)
            if state.get("pid") == proc.pid and state.get("phase") == "ready":
                return cls(settings)
            if state.get("pid") == proc.pid and state.get("phase") == "failed":
                raise TestbedError(f"testbed failed to start: {state.get('error')}\n{cls._out_tail(settings)}")
            if proc.poll() is not None:
                raise TestbedError(f"testbed exited with {proc.returncode}\n{cls._out_tail(settings)}")
            time.sleep(0.1)
        proc.terminate()
        raise TestbedError(f"testbed not ready after {timeout_s:.0f}s\n{cls._out_tail(settings)}")

    @classmethod
    def attach(cls, settings: TestbedSettings | None = None) -> Testbed:
        """A testbed already running (`make k8s-up`)."""
        settings = settings or TestbedSettings.from_env()
        if cleanup.supervisor_pid(settings) is None or cleanup.read_state(settings).get("phase") != "ready":
            raise TestbedError(f"no testbed is running from {settings.run_dir}")
        return cls(settings)

    @staticmethod
    def _out_tail(settings: TestbedSettings) -> str:
        try:
            return (settings.run_dir / cleanup.SUPERVISOR_OUT).read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def stop(self) -> dict[str, list]:
        """Stops the testbed and returns anything it left behind (empty when clean)."""
        cleanup.stop_supervisor(self.settings)
        return cleanup.leftovers(self.settings)

    @property
    def state(self) -> dict[str, Any]:
        return cleanup.read_state(self.settings)

    # -- kubectl ---------------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.settings.kubeconfig

    @property
    def kubectl_path(self) -> str:
        return str(self.settings.bin_dir / "kubectl")

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig),
                "PATH": f"{self.settings.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([self.kubectl_path, *args], input=input, capture_output=True, text=True,
                                env=self.env(), timeout=timeout_s, check=False)
        if check and result.returncode != 0:
            raise TestbedError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
        return result

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)
