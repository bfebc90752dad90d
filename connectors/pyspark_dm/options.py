"""The connector's options, parsed and checked once, with errors that name the option.

Option names and meanings are Spark's Kafka source/sink ones, so a pipeline changes only the
format name. Spark hands options over case-insensitively (lower-cased keys).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from typing import Literal

from dm_broker.config_error import ConfigError
from dm_broker.security.client_config import to_librdkafka, wire_security
from pydantic import BaseModel, ConfigDict

from .errors import DmSourceError
from .wire import EARLIEST, LATEST, parse_bootstrap

# Spark spells options in camelCase; it lower-cases them before we see them.
READ_OPTIONS = ("kafka.bootstrap.servers", "bootstrap.servers", "subscribe", "subscribePattern", "assign",
                "startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
                "startingOffsetsByTimestampStrategy", "maxOffsetsPerTrigger", "minPartitions", "includeHeaders",
                "failOnDataLoss", "fetchMaxBytes", "timeoutMs")
WRITE_OPTIONS = ("kafka.bootstrap.servers", "bootstrap.servers", "topic", "timeoutMs", "deliveryGuarantee",
                 "transactionalIdPrefix", "commitLogTopic")
DEFAULT_COMMIT_LOG_TOPIC = "dm-spark-sink-commits"
# The brokers' default transaction.max.timeout.ms: the longest a batch, or a driver outage in the
# middle of a commit, may last before the coordinator aborts the open transactions.
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000

OffsetSpec = Literal["earliest", "latest"] | dict[str, dict[int, int]]


class Options(BaseModel):
    """Options both directions share."""

    model_config = ConfigDict(frozen=True)
    bootstrap: str
    # Every kafka.* option but bootstrap.servers, in librdkafka's names (security settings given in the
    # Java client's, as for Spark's Kafka source, translated): the writer's producer settings, and the
    # TLS/SASL settings of every connection the connector makes.
    client_config: dict[str, str]
    timeout_s: float = 30.0


class ReadOptions(Options):
    include_headers: bool = False
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting: OffsetSpec | None = None  # None: the direction's default (batch earliest, streaming latest)
    ending: OffsetSpec = "latest"
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    timestamp_strategy: Literal["error", "latest"] = "error"
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    fetch_max_bytes: int = 8 << 20
    read_committed: bool = False  # kafka.isolation.level, as Spark's Kafka source (read_uncommitted by default)

    def topics_wanted(self, all_topics: list[str]) -> list[str]:
        """The topics this query reads, among `all_topics` (pattern subscriptions match again each time)."""
        if self.subscribe_pattern is not None:
            pattern = re.compile(self.subscribe_pattern)
            return sorted(t for t in all_topics if pattern.fullmatch(t) and not t.startswith("__"))
        if self.assign is not None:
            return sorted(self.assign)
        return list(self.subscribe)


class WriteOptions(Options):
    topic: str | None = None
    exactly_once: bool = False
    transactional_id_prefix: str | None = None
    commit_log_topic: str = DEFAULT_COMMIT_LOG_TOPIC
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS


def _get(options: Mapping[str, str], name: str) -> str | None:
    value = options.get(name.lower())
    return None if value is None else str(value)


# Options Spark itself sets on every source or sink; they are not ours to refuse.
SPARK_OPTIONS = frozenset({"path", "checkpointlocation", "queryname"})


def _check_known(options: Mapping[str, str], known: tuple[str, ...]) -> None:
    """A misspelt option would otherwise be ignored silently and read or write the wrong thing."""
    allowed = {k.lower() for k in known} | SPARK_OPTIONS
    for key in options:
        if key.lower() not in allowed and not key.lower().startswith(("kafka.", "spark.")):
            close = difflib.get_close_matches(key.lower(), [k.lower() for k in known], n=1)
            hint = f" (did you mean {next(k for k in known if k.lower() == close[0])}?)" if close else ""
            raise DmSourceError(f"unknown option {key!r}{hint}; options: {', '.join(known)}")


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = _get(options, name)
    if value is None:
        return default
    if value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise DmSourceError(f"option {name}: expected true or false, got {value!r}")


def include_headers(options: Mapping[str, str]) -> bool:
    """The read option that decides the schema (Spark asks for it before anything else)."""
    return _bool({k.lower(): v for k, v in options.items()}, "includeHeaders", False)


def _int(options: Mapping[str, str], name: str, minimum: int | None = None) -> int | None:
    value = _get(options, name)
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        raise DmSourceError(f"option {name}: expected an integer, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise DmSourceError(f"option {name}: must be at least {minimum}, got {number}")
    return number


def _common(options: Mapping[str, str]) -> dict:
    bootstrap = _get(options, "kafka.bootstrap.servers") or _get(options, "bootstrap.servers")
    if not bootstrap:
        raise DmSourceError("option kafka.bootstrap.servers is required (host:port[,host:port...])")
    parse_bootstrap(bootstrap)
    given = {k[len("kafka."):]: str(v) for k, v in options.items()
             if k.lower().startswith("kafka.") and k.lower() != "kafka.bootstrap.servers"}
    try:
        client_config = to_librdkafka(given)
        wire_security(client_config)  # here, on the driver: a wrong setting fails the query, not its tasks
    except ConfigError as exc:
        named = re.match(r"[a-z]+(\.[a-z]+)+[:= ]", str(exc))  # the message starts with the property's name
        raise DmSourceError(f"option kafka.{exc}" if named else f"kafka.* options: {exc}") from None
    timeout_ms = _int(options, "timeoutMs", minimum=1)
    return {"bootstrap": bootstrap, "client_config": client_config,
            "timeout_s": 30.0 if timeout_ms is None else timeout_ms / 1000}


def parse_offsets(name: str, value: str | None, allow_earliest: bool = True,
                  allow_latest: bool = True) -> OffsetSpec | None:
    """'earliest', 'latest' or Spark's JSON {"topic": {"0": 23, "1": -2}} (-2 earliest, -1 latest)."""
    if value is None:
        return None
    text = value.strip()
    if text.lower() in ("earliest", "latest"):
        word = text.lower()
        if (word == "earliest" and not allow_earliest) or (word == "latest" and not allow_latest):
            raise DmSourceError(f"option {name}: {word!r} is not allowed here")
        return word  # type: ignore[return-value]
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DmSourceError(f"option {name}: not 'earliest', 'latest' or JSON like "
                            f'{{"topic":{{"0":23}}}} ({exc.msg} at character {exc.pos})') from None
    if not isinstance(raw, dict) or not raw:
        raise DmSourceError(f'option {name}: expected a JSON object like {{"topic":{{"0":23}}}}, got {text!r}')
    spec: dict[str, dict[int, int]] = {}
    for topic, parts in raw.items():
        if not isinstance(parts, dict):
            raise DmSourceError(f"option {name}: offsets of topic {topic!r} must be an object of partition: offset")
        spec[topic] = {}
        for partition, offset in parts.items():
            if not str(partition).lstrip("-").isdigit() or int(partition) < 0:
                raise DmSourceError(f"option {name}: {topic!r} partition {partition!r} is not a partition number")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise DmSourceError(f"option {name}: {topic}-{partition}: offset must be >= 0, "
                                    f"-2 (earliest) or -1 (latest), got {offset!r}")
            if (offset == EARLIEST and not allow_earliest) or (offset == LATEST and not allow_latest):
                raise DmSourceError(f"option {name}: {topic}-{partition}: offset {offset} is not allowed here")
            spec[topic][int(partition)] = offset
    return spec


def read_options(options: Mapping[str, str], streaming: bool) -> ReadOptions:
    options = {k.lower(): v for k, v in options.items()}
    _check_known(options, READ_OPTIONS)
    subscribe = _get(options, "subscribe")
    pattern = _get(options, "subscribePattern")
    assign_text = _get(options, "assign")
    given = [n for n, v in (("subscribe", subscribe), ("subscribePattern", pattern), ("assign", assign_text)) if v]
    if len(given) != 1:
        raise DmSourceError("exactly one of the options subscribe, subscribePattern or assign is required"
                            + (f" (got {', '.join(given)})" if given else ""))
    topics: tuple[str, ...] = ()
    assign = None
    if subscribe:
        topics = tuple(t.strip() for t in subscribe.split(",") if t.strip())
        if not topics:
            raise DmSourceError("option subscribe: no topic named")
    if pattern:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise DmSourceError(f"option subscribePattern: {pattern!r} is not a regular expression ({exc})") from None
    if assign_text:
        try:
            raw = json.loads(assign_text)
            assign = {str(t): tuple(int(p) for p in ps) for t, ps in raw.items()}
        except (ValueError, TypeError, AttributeError):
            raise DmSourceError(f'option assign: expected JSON like {{"topic":[0,1]}}, got {assign_text!r}') from None
    ending = _get(options, "endingOffsets")
    ending_ts = _int(options, "endingTimestamp", minimum=0)
    if streaming and (ending is not None or ending_ts is not None):
        raise DmSourceError("options endingOffsets/endingTimestamp are for batch queries only")
    strategy = (_get(options, "startingOffsetsByTimestampStrategy") or "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise DmSourceError(f"option startingOffsetsByTimestampStrategy: 'error' or 'latest', got {strategy!r}")
    fetch_max = _int(options, "fetchMaxBytes", minimum=1024)
    isolation = (_get(options, "kafka.isolation.level") or "read_uncommitted").strip().lower()
    if isolation not in ("read_uncommitted", "read_committed"):
        raise DmSourceError(f"option kafka.isolation.level: read_uncommitted or read_committed, got {isolation!r}")
    return ReadOptions(
        read_committed=isolation == "read_committed",
        include_headers=include_headers(options),
        **_common(options),
        subscribe=topics, subscribe_pattern=pattern, assign=assign,
        starting=parse_offsets("startingOffsets", _get(options, "startingOffsets"), allow_latest=streaming),
        ending=parse_offsets("endingOffsets", ending, allow_earliest=False) or "latest",
        starting_timestamp=_int(options, "startingTimestamp", minimum=0),
        ending_timestamp=ending_ts,
        timestamp_strategy=strategy,
        max_offsets_per_trigger=_int(options, "maxOffsetsPerTrigger", minimum=1),
        min_partitions=_int(options, "minPartitions", minimum=1),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        **({"fetch_max_bytes": fetch_max} if fetch_max is not None else {}),
    )


def write_options(options: Mapping[str, str]) -> WriteOptions:
    options = {k.lower(): v for k, v in options.items()}
    _check_known(options, WRITE_OPTIONS)
    topic = _get(options, "topic")
    if topic is not None and not topic.strip():
        raise DmSourceError("option topic is empty")
    common = _common(options)
    guarantee = (_get(options, "deliveryGuarantee") or "at-least-once").strip().lower()
    if guarantee not in ("at-least-once", "exactly-once"):
        raise DmSourceError(f"option deliveryGuarantee: at-least-once or exactly-once, got {guarantee!r}")
    prefix = (_get(options, "transactionalIdPrefix") or "").strip() or None
    config = common["client_config"]
    if "transactional.id" in config:
        raise DmSourceError("option kafka.transactional.id: the sink names its transactions itself; set "
                            "deliveryGuarantee=exactly-once and transactionalIdPrefix instead")
    if guarantee == "exactly-once" and prefix is None:
        raise DmSourceError("deliveryGuarantee=exactly-once needs the option transactionalIdPrefix: a name unique "
                            "to this query (or job) that stays the same when it restarts")
    if guarantee != "exactly-once" and prefix is not None:
        raise DmSourceError("option transactionalIdPrefix is for deliveryGuarantee=exactly-once")
    timeout = config.get("transaction.timeout.ms", str(DEFAULT_TRANSACTION_TIMEOUT_MS))
    if not timeout.strip().isdigit() or int(timeout) < 1000:
        raise DmSourceError(f"option kafka.transaction.timeout.ms: a number of milliseconds >= 1000, got {timeout!r}")
    return WriteOptions(**common, topic=topic.strip() if topic else None, exactly_once=guarantee == "exactly-once",
                        transactional_id_prefix=prefix, transaction_timeout_ms=int(timeout),
                        commit_log_topic=(_get(options, "commitLogTopic") or DEFAULT_COMMIT_LOG_TOPIC).strip())
