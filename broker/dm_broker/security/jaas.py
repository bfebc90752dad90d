"""Kafka's `sasl.jaas.config` values: `<LoginModule> required key="value" ...;` (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..config_error import ConfigError

_HEAD = re.compile(r"\s*([A-Za-z_$][\w.$]*)\s+(required|requisite|sufficient|optional)\s*", re.IGNORECASE)
_OPTION = re.compile(r'\s*([\w.\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))\s*')


@dataclass(frozen=True)
class JaasConfig:
    module: str = ""
    options: dict[str, str] = field(default_factory=dict)

    @property
    def users(self) -> dict[str, str]:
        """PlainLoginModule's server-side users: `user_<name>="<password>"`."""
        return {k[len("user_"):]: v for k, v in self.options.items() if k.startswith("user_")}

    @property
    def client_credentials(self) -> tuple[str, str] | None:
        """(username, password) this broker authenticates to others with, if given."""
        if "username" in self.options and "password" in self.options:
            return self.options["username"], self.options["password"]
        return None


def parse_jaas(text: str, prop: str = "sasl.jaas.config") -> JaasConfig:
    if not text or not text.strip():
        return JaasConfig()
    m = _HEAD.match(text)
    if m is None:
        raise ConfigError(f"{prop}: expected '<LoginModule> required key=\"value\" ...;'")
    pos = m.end()
    options: dict[str, str] = {}
    while pos < len(text):
        rest = text[pos:].strip()
        if rest in ("", ";"):
            break
        o = _OPTION.match(text, pos)
        if o is None:
            raise ConfigError(f"{prop}: cannot read an option at {text[pos:pos + 30]!r}")
        value = o.group(2) if o.group(2) is not None else o.group(3)
        options[o.group(1)] = re.sub(r"\\(.)", r"\1", value)
        pos = o.end()
    if not text.rstrip().endswith(";"):
        raise ConfigError(f"{prop}: a JAAS configuration ends with ';'")
    return JaasConfig(m.group(1), options)
