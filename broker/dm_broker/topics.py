"""Topic metadata of a broker: names, ids, partition counts and config overrides.

A single broker keeps it in `<data dir>/__dm_meta/topics.json` (atomic write + fsync); the
document shape is shared with the controller's store so a multi-broker cluster uses the same
models.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

from pydantic import BaseModel, Field

from .log.checkpoints import atomic_write

TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets"})


class InvalidTopicError(ValueError):
    pass


def validate_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise InvalidTopicError(f"invalid topic name {name!r}")
    if not TOPIC_NAME.match(name):
        raise InvalidTopicError(
            f"invalid topic name {name!r}: up to 249 characters of ASCII letters, digits, '.', '_', '-'"
        )


class TopicInfo(BaseModel):
    name: str
    topic_id: str = Field(default_factory=lambda: str(uuid.uuid4()))
    partitions: int
    replication_factor: int = 1
    configs: dict[str, str] = Field(default_factory=dict)

    @property
    def uuid(self) -> uuid.UUID:
        return uuid.UUID(self.topic_id)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class ClusterDocument(BaseModel):
    cluster_id: str = Field(default_factory=lambda: uuid.uuid4().hex[:22])
    next_producer_id: int = 0
    topics: dict[str, TopicInfo] = Field(default_factory=dict)


class TopicStore:
    """Durable topic registry of a standalone broker."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "__dm_meta" / "topics.json"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            self.doc = ClusterDocument.model_validate(json.loads(self.path.read_text()))
        else:
            self.doc = ClusterDocument()
            self._save()

    @property
    def cluster_id(self) -> str:
        return self.doc.cluster_id

    @property
    def topics(self) -> dict[str, TopicInfo]:
        return self.doc.topics

    def get(self, name: str) -> TopicInfo | None:
        return self.doc.topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        text = str(topic_id)
        return next((t for t in self.doc.topics.values() if t.topic_id == text), None)

    def put(self, topic: TopicInfo) -> None:
        self.doc.topics[topic.name] = topic
        self._save()

    def remove(self, name: str) -> None:
        self.doc.topics.pop(name, None)
        self._save()

    def allocate_producer_ids(self, count: int) -> int:
        """Reserves a block of producer ids durably; returns the first."""
        first = self.doc.next_producer_id
        self.doc.next_producer_id += count
        self._save()
        return first

    def _save(self) -> None:
        atomic_write(self.path, self.doc.model_dump_json(indent=1).encode())
