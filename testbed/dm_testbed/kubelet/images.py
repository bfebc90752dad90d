"""Which local program an image stands for. The testbed runs no container images: an image is
mapped to an environment on this machine, and containers of an unmapped image fail the way an
image pull does (ErrImagePull, then ImagePullBackOff), with the reason in the pod's status.

Built in: any image whose repository's last path component is `dm` (`dm`, `ghcr.io/acme/dm:1.2`,
`localhost/dm@sha256:…`) runs from the project's virtualenv, with the image's entrypoint `dm`; its
other programs (`dm-operator`, `python`) are found in the same virtualenv's bin directory.
DM_TESTBED_IMAGES adds mappings as JSON: {"name": {"bin_dir": "/path/bin", "entrypoint": ["prog"]}}.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from pydantic import BaseModel


class ImageError(Exception):
    """Reported in the container's waiting state like a pull failure."""


class ImageRuntime(BaseModel):
    bin_dir: Path
    entrypoint: list[str]
    args: list[str] = []


def repository_name(image: str) -> str:
    """`ghcr.io/acme/dm:1.2` -> `dm`; `localhost:5000/dm@sha256:…` -> `dm`."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    return last.split(":", 1)[0]


def default_runtimes() -> dict[str, ImageRuntime]:
    venv_bin = Path(sys.executable).parent
    runtimes = {"dm": ImageRuntime(bin_dir=venv_bin, entrypoint=["dm"])}
    extra = os.environ.get("DM_TESTBED_IMAGES")
    if extra:
        for name, spec in json.loads(extra).items():
            runtimes[name] = ImageRuntime.model_validate(spec)
    return runtimes


def command_for(image: str, command: list[str] | None, args: list[str] | None,
                runtimes: dict[str, ImageRuntime]) -> tuple[list[str], ImageRuntime]:
    """The argv a container runs, as a container runtime builds it from ENTRYPOINT/CMD and the
    pod's command/args: `command` replaces the entrypoint (and drops the image's args)."""
    if not image:
        raise ImageError("InvalidImageName: the container has no image")
    runtime = runtimes.get(repository_name(image))
    if runtime is None:
        known = ", ".join(sorted(runtimes))
        raise ImageError(f'image "{image}" is not mapped to a local environment on the dm testbed '
                         f"(mapped: {known}; see DM_TESTBED_IMAGES)")
    if command:
        argv = list(command) + list(args or [])
    else:
        argv = list(runtime.entrypoint) + list(args if args is not None else runtime.args)
    if not argv:
        raise ImageError(f"image {image}: no command to run")
    local = runtime.bin_dir / argv[0]
    if "/" not in argv[0] and local.exists():
        argv[0] = str(local)
    return argv, runtime
