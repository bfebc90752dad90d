"""What a part of the broker may ask of the cluster it runs in, each a narrow `Protocol` (ADR 0062).

A helper that took the whole broker typed `Any` could read any of its ~90 members, and no checker or reader
could say which; one typed against a port names the few it uses, and a test builds it from anything that has
them. The broker satisfies them all today; as the hub is dissolved (issue 64) the parts that own each port
(the cluster image, the controller gateway) satisfy them instead, and the helpers do not change. Nothing here
imports the broker."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .config import BrokerConfig, TopicSettings
    from .controller.models import RegisterRequest, TopicDoc
    from .security.setup import SecuritySetup


class TopicLookup(Protocol):
    """The topics as the last metadata this broker applied has them."""

    def topic(self, name: str) -> TopicDoc | None: ...

    def topics(self) -> Mapping[str, TopicDoc]: ...


class LeaderVerdicts(TopicLookup, Protocol):
    """Leaders this broker lost its connection to, and the controller's ruling on them."""

    def suspected(self, node_id: int) -> bool: ...

    async def wait_for_verdict(self, leaders: set[int], timeout: float) -> None: ...


class TopicConfigs(TopicLookup, Protocol):
    """A topic's effective settings, and changing its overrides through the controller."""

    def topic_settings(self, name: str) -> TopicSettings | None: ...

    async def alter_topic_configs(self, name: str, configs: dict[str, str], validate_only: bool = False) -> None: ...


class ConfigLevels(Protocol):
    """Where the broker's and a group's settings come from: static, dynamic per broker, cluster-wide, default."""

    config: BrokerConfig

    def config_levels(self, name: str) -> list[tuple[Any, str]]: ...

    def group_configs(self, group: str) -> dict[str, str]: ...


class BrokerIdentity(ConfigLevels, Protocol):
    """This broker's id, configuration, listeners as bound and registration, for what Kafka's tools ask by
    Kafka's names."""

    node_id: int
    security: SecuritySetup
    bound_ports: dict[str, int]

    def registration(self) -> RegisterRequest: ...
