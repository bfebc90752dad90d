"""Kafka's connection limits: `max.connections` (for the broker, and per listener with
`listener.name.<listener>.max.connections`), `max.connections.per.ip` and
`max.connections.per.ip.overrides` ("host:count,host:count"). A connection over a limit is closed as
soon as it is accepted, before it is read (Kafka's acceptor waits for a free slot instead; closing
keeps a flood from holding sockets open). The inter-broker listener is exempt from the broker-wide
limit, as in Kafka, so brokers always reach each other.

Beyond Kafka's limits, connections never take the descriptors the logs need (open_files.py): a flood of
idle connections up to the open-file limit made every segment roll fail with "Too many open files", and
producers' records timed out while the broker stayed up."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from .config import BrokerConfig, ConfigError
from .open_files import INTER_BROKER_SHARE

UNLIMITED = 2**31 - 1


def parse_overrides(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in (i.strip() for i in text.split(",") if i.strip()):
        host, sep, count = item.rpartition(":")
        if not sep or not host:
            raise ConfigError(f"max.connections.per.ip.overrides: expected host:count, got {item!r}")
        try:
            out[host] = int(count)
        except ValueError:
            raise ConfigError(f"max.connections.per.ip.overrides: {count!r} is not a number") from None
    return out


class ConnectionQuotas:
    def __init__(self, config: BrokerConfig, inter_broker_listener: str,
                 descriptor_budget: Callable[[], int] = lambda: UNLIMITED) -> None:
        self.config = config
        self.descriptor_budget = descriptor_budget  # connections the open-file limit leaves room for
        self._also: list[Callable[[], int]] = []  # connections held elsewhere (the HTTP servers)
        self.inter_broker = inter_broker_listener
        self.broker_limit: int = config["max.connections"]
        self.per_ip: int = config["max.connections.per.ip"]
        self.per_ip_overrides = parse_overrides(config["max.connections.per.ip.overrides"])
        self.total = 0
        self.http_total = 0  # the REST Proxy's connections (http_refusal)
        self.by_listener: Counter[str] = Counter()
        self.by_host: Counter[str] = Counter()

    def refusal(self, listener: str, host: str) -> str | None:
        """Why a new connection from `host` on `listener` is refused, or None (then it is counted)."""
        host_limit = self.per_ip_overrides.get(host, self.per_ip)
        if self.by_host[host] >= host_limit:
            return f"max.connections.per.ip ({host_limit}) reached for {host}"
        scoped = f"listener.name.{listener.lower()}.max.connections"
        if scoped in self.config.scoped and self.by_listener[listener] >= self.config.scoped[scoped]:
            return f"{scoped} ({self.config.scoped[scoped]}) reached"
        if listener != self.inter_broker and self.total >= self.broker_limit:
            return f"max.connections ({self.broker_limit}) reached"
        budget = self.descriptor_budget() + (INTER_BROKER_SHARE if listener == self.inter_broker else 0)
        if self.total + self.elsewhere() >= budget:
            return (f"the open-file limit leaves no descriptor for connection {self.total + 1}: the rest are kept "
                    f"for the logs' segments (raise it: ulimit -n, systemd LimitNOFILE, the container runtime's "
                    f"nofile; or set max.connections below it)")
        self.total += 1
        self.by_listener[listener] += 1
        self.by_host[host] += 1
        return None

    def http_refusal(self, listener: str, host: str) -> str | None:
        """Why a new connection from `host` on the HTTP listener `listener` (the REST Proxy's) is refused, or
        None (then it is counted, until http_release). The same per-address limits as the Kafka listeners, and
        at most half the descriptors the logs leave: an HTTP flood never takes the Kafka listeners' (issue 65)."""
        host_limit = self.per_ip_overrides.get(host, self.per_ip)
        if self.by_host[host] >= host_limit:
            return f"max.connections.per.ip ({host_limit}) reached for {host}"
        scoped = f"listener.name.{listener.lower()}.max.connections"
        if scoped in self.config.scoped and self.by_listener[listener] >= self.config.scoped[scoped]:
            return f"{scoped} ({self.config.scoped[scoped]}) reached"
        if self.http_total >= self.descriptor_budget() // 2:
            return "the HTTP listeners hold half of the descriptors the open-file limit leaves beside the logs"
        self.http_total += 1
        self.by_listener[listener] += 1
        self.by_host[host] += 1
        return None

    def http_release(self, listener: str, host: str) -> None:
        self.http_total -= 1
        self._forget(listener, host)

    def count_also(self, connections: Callable[[], int]) -> None:
        """Connections another server holds (an HTTP site) draw on the same descriptors."""
        self._also.append(connections)

    def elsewhere(self) -> int:
        return self.http_total + sum(count() for count in self._also)

    def descriptors_left(self) -> bool:
        """Whether one more connection of another server (HTTP) fits the descriptor budget."""
        return self.total + self.elsewhere() < self.descriptor_budget()

    def release(self, listener: str, host: str) -> None:
        self.total -= 1
        self._forget(listener, host)

    def _forget(self, listener: str, host: str) -> None:
        self.by_listener[listener] -= 1
        self.by_host[host] -= 1
        if self.by_host[host] <= 0:
            del self.by_host[host]
