"""Topic regexes from clients (KIP-848's SubscribedTopicRegex, the REST Proxy's topic_pattern), with RE2.

Python's `re` backtracks: `(.|.)*X0` against a 25-character topic name took 17 s on the event loop, and each
character more doubles it. Kafka matches these regexes with RE2/J for that reason; dm with RE2 itself
(google-re2), whose matching is linear in the name's length and whose compiled program is bounded in memory.
What RE2 does not support (backreferences, lookaround) is refused as Kafka refuses it
(INVALID_REGULAR_EXPRESSION), never tried another way.
"""

from __future__ import annotations

import functools
from typing import Protocol

import re2

# RE2's memory for one compiled regex (its default is 8 MiB); a pattern needing more is refused.
MAX_PROGRAM_BYTES = 1 << 20
# Longest pattern accepted: far above any real subscription, and its compilation stays under a millisecond.
MAX_PATTERN_CHARS = 4096
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a client's bad pattern is its error, answered, not the broker's to log
_OPTIONS.max_mem = MAX_PROGRAM_BYTES


class InvalidRegex(ValueError):
    """The pattern is not one RE2 accepts (or is too long); the message says why."""


class TopicPattern(Protocol):
    def fullmatch(self, text: str) -> object | None: ...


@functools.lru_cache(maxsize=1024)
def compile_topic_regex(pattern: str) -> TopicPattern:
    """The compiled pattern (cached: a group's members send the same one at every heartbeat)."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise InvalidRegex(f"longer than {MAX_PATTERN_CHARS} characters")
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        raise InvalidRegex(reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)) from None
