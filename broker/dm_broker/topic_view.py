"""The broker's topics indexed as its handlers look them up: by name (topic id and partition count, as
KIP-848 and share group heartbeats see them), by topic id (Fetch, ShareFetch, Metadata, DeleteTopics and
the group describe answers), and which of them a subscription regex matches. Built once per metadata
version, not per request: a lookup then costs what the request names, not the number of topics."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .regexes import TopicPattern

Topics = dict[str, tuple[str, int]]
MAX_REMEMBERED_MATCHES = 1024


class TopicView:
    def __init__(self, metadata: Callable[[], Any], compile_regex: Callable[[str], TopicPattern]) -> None:
        self._metadata = metadata  # the broker's current ClusterMetadata (or None)
        self._compile = compile_regex
        self._seen: tuple[Any, int] | None = None  # (metadata object, its version) the index was built from
        self._topics: Topics = {}
        self._docs: dict[str, Any] = {}
        self._names: dict[str, str] = {}
        self._matches: dict[str, frozenset[str]] = {}

    def topics(self) -> Topics:
        md = self._metadata()
        version = md.version if md is not None else -1
        if self._seen is None or self._seen[0] is not md or self._seen[1] != version:
            docs: Mapping[str, Any] = md.topics if md is not None else {}
            self._topics = {name: (t.topic_id, len(t.partitions)) for name, t in docs.items()}
            self._docs = {t.topic_id: t for t in docs.values()}
            self._names = {t.topic_id: name for name, t in docs.items()}
            self._matches = {}
            self._seen = (md, version)
        return self._topics

    def by_id(self, topic_id: str) -> Any:
        """The topic (TopicDoc) with this id, or None."""
        self.topics()
        return self._docs.get(topic_id)

    def names_by_id(self) -> dict[str, str]:
        """Topic id -> name (ShareFetch and the describe answers name topics by id)."""
        self.topics()
        return self._names

    def matching(self, regex: str) -> frozenset[str]:
        """Non-internal topics the regex fully matches (internal ones, `__*`, only by name)."""
        topics = self.topics()
        found = self._matches.get(regex)
        if found is None:
            if len(self._matches) >= MAX_REMEMBERED_MATCHES:  # many distinct regexes: their sets are not all kept
                self._matches.clear()
            pattern = self._compile(regex)
            found = self._matches[regex] = frozenset(n for n in topics if not n.startswith("__")
                                                     and pattern.fullmatch(n))
        return found
