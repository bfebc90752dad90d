"""The first program of every emulated container: enters the pod's network namespace, makes its own
mount and UTS namespaces, mounts the pod's volumes at their mountPaths, then execs the container's
command. Also `--enter PID`: runs a command inside a running container's namespaces (exec probes).

Runs as `python -m dm_testbed.container_init SPEC.json`; the spec is written by the node agent
(`ContainerSpec`). Single-threaded on purpose: setns(CLONE_NEWNS) refuses multi-threaded callers.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from pathlib import Path

from pydantic import BaseModel

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18

_libc = ctypes.CDLL(None, use_errno=True)


class Mount(BaseModel):
    source: str
    target: str
    read_only: bool = False


class ContainerSpec(BaseModel):
    netns: str  # /run/netns/<name>
    hostname: str
    mounts: list[Mount]  # applied in order; the first is the container's private /tmp
    read_only_root: bool = False
    # Host directories the container's programs need (the virtualenv, the project) that a mount at
    # /tmp would hide when they live below /tmp: bound back after the volumes.
    keep_visible: list[str] = []
    workdir: str | None = None
    argv: list[str]
    env: dict[str, str]


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, flags: int) -> None:
    _check(_libc.mount(source.encode() if source else None, target.encode(), None, flags, None),
           f"mount {source} on {target}")


def _setns(path: str, nstype: int) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        _check(_libc.setns(fd, nstype), f"setns {path}")
    finally:
        os.close(fd)


def start(spec: ContainerSpec) -> None:
    _setns(spec.netns, CLONE_NEWNET)
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWUTS), "unshare")
    # Nothing mounted from here on may propagate back to the host.
    _mount("none", "/", MS_REC | MS_PRIVATE)
    name = spec.hostname.encode()
    _check(_libc.sethostname(name, len(name)), "sethostname")
    # Sources are opened before anything is mounted, so a mount over /tmp cannot hide a source that
    # lives below /tmp; each is then mounted through its /proc/self/fd link.
    fds = [os.open(m.source, os.O_PATH) for m in spec.mounts]
    keep = {path: os.open(path, os.O_PATH) for path in spec.keep_visible}
    for m, fd in zip(spec.mounts, fds, strict=True):
        _mount(f"/proc/self/fd/{fd}", m.target, MS_BIND | MS_REC)
        if m.read_only:
            _mount(None, m.target, MS_REMOUNT | MS_BIND | MS_RDONLY)
        os.close(fd)
    for path, fd in keep.items():
        hidden = any(path == m.target or path.startswith(m.target.rstrip("/") + "/") for m in spec.mounts)
        if hidden:
            os.makedirs(path, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", path, MS_BIND | MS_REC)
        os.close(fd)
    # Last: a bind mount copies its source mount's flags, and the sources live on the root mount.
    if spec.read_only_root:
        _mount(None, "/", MS_REMOUNT | MS_BIND | MS_RDONLY)
    if spec.workdir:
        os.chdir(spec.workdir)
    os.execvpe(spec.argv[0], spec.argv, spec.env)


def enter(pid: int, argv: list[str], env: dict[str, str] | None) -> None:
    for ns, flag in (("net", CLONE_NEWNET), ("uts", CLONE_NEWUTS), ("mnt", CLONE_NEWNS)):
        _setns(f"/proc/{pid}/ns/{ns}", flag)
    try:
        os.chdir(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        os.chdir("/")
    if env is None:
        raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        env = dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)
    os.execvpe(argv[0], argv, env)


def main() -> None:
    try:
        if sys.argv[1] == "--enter":
            enter(int(sys.argv[2]), sys.argv[3:], None)
        else:
            start(ContainerSpec.model_validate(json.loads(Path(sys.argv[1]).read_text())))
    except OSError as exc:
        # The agent reads this line from the container's log to report why it could not start.
        print(f"container_init: {exc}", file=sys.stderr, flush=True)
        sys.exit(128)


if __name__ == "__main__":
    main()
