"""Shared confluent-kafka plumbing of the CLI tools."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, NoReturn

DEFAULT_BOOTSTRAP = os.environ.get("DM_BOOTSTRAP", "127.0.0.1:9092")
# Client properties from --command-config (Kafka's tools' option; env DM_COMMAND_CONFIG), in librdkafka's
# names (security.protocol, ssl.ca.location, sasl.mechanism, sasl.username, sasl.password) or the Java
# client's (sasl.jaas.config, ssl.truststore.location, ...), kept here in librdkafka's.
CLIENT_CONFIG: dict[str, str] = {}


def load_command_config(path: str | None) -> None:
    """Reads a client properties file into CLIENT_CONFIG (every client the CLI makes gets it)."""
    from ..config import ConfigError, read_properties

    path = path or os.environ.get("DM_COMMAND_CONFIG")
    if not path:
        return
    from ..security.client_config import to_librdkafka

    try:
        CLIENT_CONFIG.update(to_librdkafka(read_properties(Path(path))))
    except (OSError, ConfigError) as exc:
        fail(f"--command-config {path}: {exc}")


def settings(config: dict[str, Any]) -> dict[str, Any]:
    """A client's settings with the --command-config ones (the security settings) added."""
    return {**CLIENT_CONFIG, **config}


def wire_security() -> Any:
    """The same client settings for dm's own protocol client (reassignments)."""
    from ..config import ConfigError
    from ..security.client_config import wire_security as from_config

    try:
        return from_config(CLIENT_CONFIG)
    except ConfigError as exc:
        fail(f"--command-config: {exc}")


def fail(message: str, code: int = 1) -> NoReturn:
    print(f"dm: {message}", file=sys.stderr)
    raise SystemExit(code)


def admin(bootstrap: str, auto_create: bool = False, connection: dict[str, str] | None = None) -> Any:
    """An admin client with the --command-config settings, or with `connection` instead."""
    from confluent_kafka.admin import AdminClient

    # log_level 4: librdkafka's informational lines (e.g. purging events at close) are noise here.
    # allow.auto.create.topics: a producer-type handle's metadata requests would otherwise create
    # every topic they ask about (`dm topics describe ghost` created `ghost`); only `dm produce`
    # asks for it, as Kafka's console producer does (the broker's auto.create.topics.enable decides).
    return AdminClient({**(settings({}) if connection is None else connection), "bootstrap.servers": bootstrap,
                        "socket.timeout.ms": 10000, "log_level": 4, "allow.auto.create.topics": auto_create})


def wait(futures: dict[Any, Any], timeout: float = 30) -> dict[Any, Any]:
    """Resolves admin futures; errors are reported per item, not raised."""
    results = {}
    for key, fut in futures.items():
        try:
            results[key] = fut.result(timeout=timeout)
        except Exception as exc:  # confluent-kafka raises KafkaException with the broker's error
            results[key] = exc
    return results


def produce_waiting(producer: Any, topic: str, value: bytes | None, **kwargs: Any) -> None:
    """producer.produce(), serving delivery reports while librdkafka's local queue is full."""
    while True:
        try:
            producer.produce(topic, value, **kwargs)
            return
        except BufferError:
            producer.poll(0.05)


def console() -> Any:
    """A rich console that never truncates columns when the output is piped (scripts, tests)."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=400, soft_wrap=True)
