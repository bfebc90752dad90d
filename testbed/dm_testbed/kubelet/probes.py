"""Container probes (httpGet, tcpSocket, exec) with the kubelet's timing and thresholds."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

Obj = dict[str, Any]


@dataclass
class ProbeResult:
    ok: bool
    message: str = ""


def resolve_port(port: int | str, container: Obj) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports", []):
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ValueError(f"named port {port!r} is not declared by the container")


async def run_probe(probe: Obj, container: Obj, pod_ip: str, container_pid: int | None) -> ProbeResult:
    timeout = float(probe.get("timeoutSeconds", 1))
    try:
        if "httpGet" in probe:
            spec = probe["httpGet"]
            host = spec.get("host") or pod_ip
            scheme = spec.get("scheme", "HTTP").lower()
            url = f"{scheme}://{host}:{resolve_port(spec['port'], container)}{spec.get('path', '/')}"
            headers = {h["name"]: h["value"] for h in spec.get("httpHeaders", [])}
            async with aiohttp.ClientSession() as session, session.get(
                    url, headers=headers, ssl=False, allow_redirects=False,
                    timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                body = (await resp.text(errors="replace"))[:200]
                if 200 <= resp.status < 400:
                    return ProbeResult(True)
                return ProbeResult(False, f"HTTP probe failed with statuscode: {resp.status} {body}")
        if "tcpSocket" in probe:
            spec = probe["tcpSocket"]
            port = resolve_port(spec["port"], container)
            _, writer = await asyncio.wait_for(asyncio.open_connection(spec.get("host") or pod_ip, port), timeout)
            writer.close()
            return ProbeResult(True)
        if "exec" in probe:
            if container_pid is None:
                return ProbeResult(False, "container is not running")
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "dm_testbed.container_init", "--enter", str(container_pid),
                *probe["exec"]["command"], stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
            try:
                out, _ = await asyncio.wait_for(proc.communicate(), timeout)
            except TimeoutError:
                proc.kill()
                await proc.wait()
                return ProbeResult(False, f"command timed out after {timeout:g}s")
            if proc.returncode == 0:
                return ProbeResult(True)
            return ProbeResult(False, f"command exited with {proc.returncode}: {out.decode(errors='replace')[:200]}")
        return ProbeResult(False, "probe has no handler")
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
        return ProbeResult(False, f"probe failed: {exc!r}")


class Prober:
    """Runs one probe on its period; calls `on_change(ok, message)` when the result crosses its
    success or failure threshold."""

    def __init__(self, probe: Obj, container: Obj, pod_ip: str, pid: Callable[[], int | None],
                 on_change: Callable[[bool, str], None], initial: bool) -> None:
        self.probe = probe
        self.container = container
        self.pod_ip = pod_ip
        self.pid = pid
        self.on_change = on_change
        self.state = initial
        self.period = float(probe.get("periodSeconds", 10))
        self.success_threshold = int(probe.get("successThreshold", 1))
        self.failure_threshold = int(probe.get("failureThreshold", 3))

    async def run(self) -> None:
        await asyncio.sleep(float(self.probe.get("initialDelaySeconds", 0)))
        successes = failures = 0
        while True:
            result = await run_probe(self.probe, self.container, self.pod_ip, self.pid())
            if result.ok:
                successes, failures = successes + 1, 0
                if not self.state and successes >= self.success_threshold:
                    self.state = True
                    self.on_change(True, "")
            else:
                failures, successes = failures + 1, 0
                if (self.state or failures == self.failure_threshold) and failures >= self.failure_threshold:
                    self.state = False
                    self.on_change(False, result.message)
                    failures = 0
            await asyncio.sleep(self.period)
