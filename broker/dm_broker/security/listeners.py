"""Kafka listeners from the broker configuration (pure: no sockets, no files).

`listeners=PLAINTEXT://:9092,SASL_SSL://0.0.0.0:9093`, `advertised.listeners`,
`listener.security.protocol.map` and `inter.broker.listener.name` (or
`security.inter.broker.protocol`) are read as Kafka reads them; without `listeners`, one PLAINTEXT
listener on `listener.host:listener.port` (dm's shorthand). A combination Kafka would refuse is a
ConfigError naming the property.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

from ..config import SASL_MECHANISMS, BrokerConfig, ConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_ENDPOINT = re.compile(r"^(?P<name>[A-Za-z0-9_\-]+)://(?P<host>\[[^\]]*\]|[^:\[\]]*):(?P<port>\d+)$")


class Listener(BaseModel):
    """One Kafka listener: where it binds, what clients are told, how it is secured."""

    model_config = ConfigDict(frozen=True)
    name: str  # upper case, as Kafka normalises listener names
    host: str  # bind address ("" = every interface)
    port: int
    security_protocol: str
    advertised_host: str
    advertised_port: int  # 0: the port the listener bound

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")


class ListenerSetup(BaseModel):
    model_config = ConfigDict(frozen=True)
    listeners: list[Listener]
    inter_broker: str  # the name of the listener brokers reach each other on

    def by_name(self, name: str) -> Listener:
        return next(listener for listener in self.listeners if listener.name == name)

    @property
    def inter_broker_listener(self) -> Listener:
        return self.by_name(self.inter_broker)


def parse_endpoints(text: str, prop: str) -> list[tuple[str, str, int]]:
    """(NAME, host, port) of `NAME://host:port,...`."""
    out = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        m = _ENDPOINT.match(item)
        if m is None:
            raise ConfigError(f"{prop}: {item!r} is not NAME://host:port")
        port = int(m["port"])
        if port > 65535:
            raise ConfigError(f"{prop}: port {port} of {item!r} is out of range")
        out.append((m["name"].upper(), m["host"].strip("[]"), port))
    names = [n for n, _, _ in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"{prop}: each listener name may appear once, got {', '.join(names)}")
    return out


def parse_protocol_map(text: str) -> dict[str, str]:
    out = {}
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        if not sep or protocol.strip().upper() not in SECURITY_PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL with PROTOCOL one of "
                              f"{', '.join(SECURITY_PROTOCOLS)}")
        out[name.strip().upper()] = protocol.strip().upper()
    return out


def listener_setup(config: BrokerConfig) -> ListenerSetup:
    protocols = parse_protocol_map(config["listener.security.protocol.map"])
    if config["listeners"]:
        for shorthand in ("listener.port", "advertised.port"):
            if shorthand in config.explicit:
                raise ConfigError(f"{shorthand} cannot be combined with listeners (set the port in listeners and "
                                  "advertised.listeners)")
        bound = parse_endpoints(config["listeners"], "listeners")
    else:
        bound = [("PLAINTEXT", config["listener.host"], config["listener.port"])]
    # KRaft's controller listeners (controller.listener.names) belong to its quorum, not to Kafka clients:
    # dm's controller has its own API, so they are left out rather than opened.
    kraft = {n.strip().upper() for n in config["controller.listener.names"].split(",") if n.strip()}
    if kraft and not {n for n, _, _ in bound} - kraft:
        raise ConfigError("listeners: every listener is named in controller.listener.names "
                          f"({', '.join(sorted(kraft))})")
    bound = [b for b in bound if b[0] not in kraft]
    advertised = {n: (h, p) for n, h, p in parse_endpoints(config["advertised.listeners"],
                                                           "advertised.listeners") if n not in kraft}
    unknown = sorted(set(advertised) - {n for n, _, _ in bound})
    if unknown:
        raise ConfigError(f"advertised.listeners names {', '.join(unknown)}, which listeners does not define")
    listeners = []
    for name, host, port in bound:
        protocol = protocols.get(name)
        if protocol is None:
            raise ConfigError(f"listener {name}: no security protocol for it in listener.security.protocol.map")
        if name in advertised:
            adv_host, adv_port = advertised[name]
        elif not config["listeners"]:
            adv_host, adv_port = config.advertised_host, config["advertised.port"]
        else:
            adv_host, adv_port = host or config.advertised_host, port
        if adv_host in ("", "0.0.0.0", "::"):
            raise ConfigError(f"listener {name} binds {host or 'every interface'}: set advertised.listeners (or "
                              "advertised.host) to an address clients can reach")
        listeners.append(Listener(name=name, host=host, port=port, security_protocol=protocol,
                                  advertised_host=adv_host, advertised_port=adv_port))
    inter = _inter_broker(config, listeners)
    for listener in listeners:
        if listener.sasl:
            _check_mechanisms(config, listener.name)
    fixed = [(li.host, li.port) for li in listeners if li.port]  # port 0: a free port each
    if len(set(fixed)) != len(fixed):
        raise ConfigError("listeners: two listeners bind the same host and port")
    return ListenerSetup(listeners=listeners, inter_broker=inter)


def _inter_broker(config: BrokerConfig, listeners: list[Listener]) -> str:
    name = config["inter.broker.listener.name"].strip().upper()
    if name:
        if "security.inter.broker.protocol" in config.explicit:
            raise ConfigError("set inter.broker.listener.name or security.inter.broker.protocol, not both")
        if name not in {li.name for li in listeners}:
            raise ConfigError(f"inter.broker.listener.name: {name} is not one of the listeners")
        return name
    if len(listeners) == 1 and "security.inter.broker.protocol" not in config.explicit:
        return listeners[0].name
    protocol = config["security.inter.broker.protocol"]
    match = [li.name for li in listeners if li.security_protocol == protocol]
    if not match:
        raise ConfigError(f"security.inter.broker.protocol={protocol}: no listener uses it; set "
                          "inter.broker.listener.name")
    return match[0]


def _check_mechanisms(config: BrokerConfig, listener: str) -> list[str]:
    mechanisms = [m.strip().upper() for m in str(config.for_listener(listener, "sasl.enabled.mechanisms")).split(",")
                  if m.strip()]
    if not mechanisms:
        raise ConfigError(f"listener {listener}: sasl.enabled.mechanisms is empty")
    unsupported = [m for m in mechanisms if m not in SASL_MECHANISMS]
    if unsupported:
        raise ConfigError(f"listener {listener}: SASL mechanism(s) {', '.join(unsupported)} not supported by dm "
                          f"(supported: {', '.join(SASL_MECHANISMS)})")
    return mechanisms


def enabled_mechanisms(config: BrokerConfig, listener: str) -> list[str]:
    return _check_mechanisms(config, listener)
