"""Kafka principals, and Kafka's `ssl.principal.mapping.rules` for mTLS client certificates (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..config import ConfigError

USER = "User"


@dataclass(frozen=True, slots=True)
class Principal:
    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> Principal:
        """`User:alice` (Kafka's KafkaPrincipal string); ValueError when it has no type."""
        kind, sep, name = text.strip().partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"{text!r} is not a principal like User:alice")
        return cls(kind, name)


ANONYMOUS = Principal(USER, "ANONYMOUS")


def user(name: str) -> Principal:
    return Principal(USER, name)


# Kafka's SslPrincipalMapper grammar: DEFAULT, or RULE:pattern/replacement/ with an optional L or U.
_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:,\s*|$)")


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, subject: str) -> str | None:
        if self.pattern is None:
            return subject
        m = self.pattern.fullmatch(subject)
        if m is None:
            return None
        # Java's $1 references become Python's \g<1>
        result = m.expand(re.sub(r"\$(\d+)", r"\\g<\1>", self.replacement))
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result


class PrincipalMapper:
    """Maps a certificate subject (RFC 2253, e.g. `CN=app,OU=eng,O=example`) to a principal name."""

    def __init__(self, rules: str) -> None:
        self.rules = self._parse(rules)

    @staticmethod
    def _parse(text: str) -> list[_Rule]:
        text = text.strip() or "DEFAULT"
        rules: list[_Rule] = []
        pos = 0
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise ConfigError(f"ssl.principal.mapping.rules: cannot read a rule at {text[pos:]!r} (expected "
                                  "DEFAULT or RULE:pattern/replacement/[LU])")
            if m.group(1):
                rules.append(_Rule(None))
            else:
                try:
                    pattern = re.compile(m.group(2).replace("\\/", "/"))
                except re.error as exc:
                    raise ConfigError(f"ssl.principal.mapping.rules: bad pattern {m.group(2)!r}: {exc}") from None
                rules.append(_Rule(pattern, m.group(3).replace("\\/", "/"), m.group(4)))
            pos = m.end()
        return rules

    def name(self, subject: str) -> str:
        """The principal name for `subject`; ValueError when no rule applies (as Kafka, the client is
        then refused)."""
        for rule in self.rules:
            result = rule.apply(subject)
            if result is not None:
                return result
        raise ValueError(f"no ssl.principal.mapping.rules rule applies to {subject!r}")
