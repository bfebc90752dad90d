"""The topics as KIP-848 and share group heartbeats see them (name -> topic id and partition count),
and which of them a subscription regex matches, computed once per metadata version instead of at
every heartbeat: a heartbeat then costs what the group subscribes to, not the number of topics."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Topics = dict[str, tuple[str, int]]


class TopicView:
    def __init__(self, metadata: Callable[[], Any], compile_regex: Callable[[str], re.Pattern[str]]) -> None:
        self._metadata = metadata  # the broker's current ClusterMetadata (or None)
        self._compile = compile_regex
        self._key: tuple[int, int] | None = None
        self._topics: Topics = {}
        self._matches: dict[str, frozenset[str]] = {}
        self._names: dict[str, str] = {}

    def topics(self) -> Topics:
        md = self._metadata()
        key = (id(md), md.version if md is not None else -1)
        if key != self._key:
            topics: Mapping[str, Any] = md.topics if md is not None else {}
            self._topics = {name: (t.topic_id, len(t.partitions)) for name, t in topics.items()}
            self._matches = {}
            self._names = {topic_id: name for name, (topic_id, _) in self._topics.items()}
            self._key = key
        return self._topics

    def names_by_id(self) -> dict[str, str]:
        """Topic id -> name (ShareFetch and the describe answers name topics by id)."""
        self.topics()
        return self._names

    def matching(self, regex: str) -> frozenset[str]:
        """Non-internal topics the regex fully matches (internal ones, `__*`, only by name)."""
        topics = self.topics()
        found = self._matches.get(regex)
        if found is None:
            pattern = self._compile(regex)
            found = self._matches[regex] = frozenset(n for n in topics if not n.startswith("__")
                                                     and pattern.fullmatch(n))
        return found
