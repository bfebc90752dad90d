"""Persistence of controller state: a small interface and a file implementation.

Every topic is one document updated with compare-and-set on its `version`; the cluster document
holds the cluster id, the producer-id counter and the topic deletions brokers may act on. A store
with no cluster document says so (None): the controller then takes the cluster id from its first
broker (ADR 0017) instead of minting one over data that belongs to a cluster. A change is durable
(fsynced, renamed into place, directory fsynced) before the controller acknowledges it. The
Kubernetes implementation (CRD status, resourceVersion CAS) lives in dm_operator and implements the
same interface; the interface is async because that one talks to the API server.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Protocol

from ..log.checkpoints import atomic_write
from .models import ClusterDoc, TopicDoc


class ConflictError(Exception):
    """The stored version is not the expected one."""


class ControllerStore(Protocol):
    async def load_cluster(self) -> ClusterDoc | None: ...
    async def save_cluster(self, doc: ClusterDoc, expected_version: int) -> ClusterDoc: ...
    async def load_topics(self) -> dict[str, TopicDoc]: ...
    async def load_topic(self, name: str) -> TopicDoc | None: ...
    async def save_topic(self, doc: TopicDoc, expected_version: int) -> TopicDoc: ...
    async def delete_topic(self, name: str, expected_version: int) -> None: ...
    def refusal(self, doc: TopicDoc) -> str | None:
        """Why this store cannot hold `doc` (e.g. too large for one object), or None."""
        ...


class FileControllerStore:
    """One JSON file per document; writes run in a thread (each fsyncs) so the event loop never
    waits on the disk."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        (directory / "topics").mkdir(parents=True, exist_ok=True)

    def refusal(self, doc: TopicDoc) -> str | None:
        return None  # a file holds any size

    def _topic_path(self, name: str) -> Path:
        return self.directory / "topics" / f"{name}.json"

    async def load_cluster(self) -> ClusterDoc | None:
        return await asyncio.to_thread(self._load_cluster)

    async def save_cluster(self, doc: ClusterDoc, expected_version: int) -> ClusterDoc:
        return await asyncio.to_thread(self._save_cluster, doc, expected_version)

    async def load_topics(self) -> dict[str, TopicDoc]:
        return await asyncio.to_thread(self._load_topics)

    async def load_topic(self, name: str) -> TopicDoc | None:
        return await asyncio.to_thread(self._load_topic, name)

    async def save_topic(self, doc: TopicDoc, expected_version: int) -> TopicDoc:
        return await asyncio.to_thread(self._save_topic, doc, expected_version)

    async def delete_topic(self, name: str, expected_version: int) -> None:
        await asyncio.to_thread(self._delete_topic, name, expected_version)

    def _load_cluster(self) -> ClusterDoc | None:
        path = self.directory / "cluster.json"
        return ClusterDoc.model_validate(json.loads(path.read_text())) if path.exists() else None

    def _stored_version(self, path: Path) -> int:
        """The version on disk: the compare-and-set is against the file, not against what this
        instance last wrote (as the Kubernetes store compares with the API server's copy)."""
        return json.loads(path.read_text())["version"] if path.exists() else -1

    def _save_cluster(self, doc: ClusterDoc, expected_version: int) -> ClusterDoc:
        current = self._stored_version(self.directory / "cluster.json")
        if expected_version != current:
            raise ConflictError(f"cluster document is at version {current}, not {expected_version}")
        new = doc.model_copy(update={"version": expected_version + 1})
        atomic_write(self.directory / "cluster.json", new.model_dump_json().encode())
        return new

    def _load_topics(self) -> dict[str, TopicDoc]:
        topics = {}
        for path in sorted((self.directory / "topics").glob("*.json")):
            doc = TopicDoc.model_validate(json.loads(path.read_text()))
            topics[doc.name] = doc
        return topics

    def _load_topic(self, name: str) -> TopicDoc | None:
        path = self._topic_path(name)
        if not path.exists():
            return None
        return TopicDoc.model_validate(json.loads(path.read_text()))

    def _save_topic(self, doc: TopicDoc, expected_version: int) -> TopicDoc:
        current = self._stored_version(self._topic_path(doc.name))
        if current != expected_version:
            raise ConflictError(f"topic {doc.name} is at version {current}, not {expected_version}")
        new = doc.model_copy(update={"version": expected_version + 1})
        atomic_write(self._topic_path(doc.name), new.model_dump_json().encode())
        return new

    def _delete_topic(self, name: str, expected_version: int) -> None:
        current = self._stored_version(self._topic_path(name))
        if current != expected_version:
            raise ConflictError(f"topic {name} is at version {current}, not {expected_version}")
        self._topic_path(name).unlink(missing_ok=True)
