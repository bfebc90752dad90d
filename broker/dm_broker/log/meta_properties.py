"""Which cluster and which broker a log directory belongs to: Kafka's `meta.properties`
(`version=1`, `cluster.id`, `node.id`, `directory.id`), written once the broker has joined a
cluster, read before any log of the directory is touched (ADR 0017)."""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from pathlib import Path

from .checkpoints import atomic_write

FILE = "meta.properties"


class IdentityError(Exception):
    """A log directory belongs to another broker or another cluster."""


@dataclass(frozen=True)
class MetaProperties:
    cluster_id: str
    node_id: int
    directory_id: str

    def render(self) -> bytes:
        return (f"# Written by dm, as Kafka's meta.properties: the cluster and broker this directory "
                f"belongs to.\nversion=1\ncluster.id={self.cluster_id}\nnode.id={self.node_id}\n"
                f"directory.id={self.directory_id}\n").encode()


def new_directory_id() -> str:
    """Kafka's Uuid text form: 16 random bytes, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def read(directory: Path) -> MetaProperties | None:
    path = directory / FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    try:
        return MetaProperties(values["cluster.id"], int(values["node.id"]), values.get("directory.id", ""))
    except (KeyError, ValueError):
        raise IdentityError(f"{path} is not a valid meta.properties (it needs cluster.id and node.id): "
                            f"{text[:200]!r}") from None


def check(directories: list[Path], node_id: int) -> str | None:
    """The cluster id the directories belong to (None: none was written yet). Raises IdentityError
    when a directory belongs to another broker, or the directories to different clusters."""
    clusters = {}
    for directory in directories:
        props = read(directory)
        if props is None:
            continue
        if props.node_id != node_id:
            raise IdentityError(f"{directory} belongs to broker {props.node_id} (its meta.properties says so), not "
                                f"to broker {node_id}: refusing to start (check node.id, or the volume mounted here)")
        clusters[directory] = props.cluster_id
    if len(set(clusters.values())) > 1:
        raise IdentityError(f"the log directories belong to different clusters: {clusters}")
    return next(iter(clusters.values()), None)


def new_directories(directories: list[Path]) -> list[Path]:
    """The directories without meta.properties: new, or wiped or replaced since the broker last ran."""
    return [directory for directory in directories if read(directory) is None]


def record(directories: list[Path], cluster_id: str, node_id: int) -> None:
    """Writes meta.properties where it is missing (durably)."""
    for directory in directories:
        if read(directory) is None:
            directory.mkdir(parents=True, exist_ok=True)
            atomic_write(directory / FILE, MetaProperties(cluster_id, node_id, new_directory_id()).render())
