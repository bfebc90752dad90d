"""Topic and config administration: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs,
AlterConfigs, IncrementalAlterConfigs (topics, and the dynamic broker configs)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ...config import (
    BROKER_PROPERTIES,
    GROUP_PROPERTIES,
    GROUP_TO_BROKER,
    TOPIC_PROPERTIES,
    TOPIC_TO_BROKER,
    ConfigError,
    TopicSettings,
    validate_topic_configs,
)
from ...controller.models import TopicDoc
from ...errors import KafkaError
from ...ports import BrokerIdentity, ConfigLevels, TopicConfigs, TopicLookup
from ...quotas.entities import CONTROLLER_MUTATION_RATE
from ...security.acls import CLUSTER_NAME, Operation, ResourceType
from ..build import ZERO, make, nested, nested_optional
from ..dispatch import RequestContext
from .transactions import init_transactional_producer

log = logging.getLogger(__name__)
NULL_UUID = uuid.UUID(int=0)
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32
SOURCE_GROUP = 8  # Kafka's ConfigSource.GROUP_CONFIG
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
CONFIG_TYPES = {"bool": 1, "str": 2, "choice": 2, "int": 5, "float": 6}  # BOOLEAN, STRING, LONG, DOUBLE
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


# KIP-599: the versions that know THROTTLING_QUOTA_EXCEEDED
STRICT_MUTATION_QUOTA_FROM = {"CreateTopics": 6, "DeleteTopics": 5, "CreatePartitions": 3}


def _count_mutations(ctx: RequestContext, partitions: int) -> None:
    """controller_mutation_rate (KIP-599), counted in partitions created or deleted. Over the quota,
    versions that know THROTTLING_QUOTA_EXCEEDED get it for the topic (nothing done, the client
    retries after the throttle); older ones are done and throttled after."""
    quotas = ctx.broker.quotas
    if not quotas.limits(CONTROLLER_MUTATION_RATE) or partitions <= 0:
        return
    if ctx.version >= STRICT_MUTATION_QUOTA_FROM[ctx.api]:
        over = quotas.exceeded(CONTROLLER_MUTATION_RATE, ctx.session.principal.name, ctx.client_id)
        if over > 0:
            ctx.throttle(over)
            raise KafkaError(ErrorCode.throttling_quota_exceeded,
                             f"controller_mutation_rate exceeded: retry in {over:.1f} s")
    ctx.record_quota(CONTROLLER_MUTATION_RATE, partitions)


async def handle_create_topics(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    cls = ctx.response_cls
    result_cls = nested(cls, "CreatableTopicResult")
    config_cls = nested(cls, "CreatableTopicConfigs") if "configs" in result_cls.__dataclass_fields__ else None
    seen: set[str] = set()
    create_any = ctx.allowed(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)

    async def create(t: Any) -> tuple[ErrorCode, str | None, TopicDoc | None]:
        try:
            partitions, rf, assignments, configs = _creatable(ctx, t, seen, create_any, req.validate_only)
            return ErrorCode.none, None, await broker.create_topic(
                t.name, partitions, rf, configs, validate_only=req.validate_only, assignments=assignments)
        except KafkaError as exc:
            return exc.code, exc.message, None

    # Checked in request order (a name given twice, the mutation quota), created side by side: the
    # controller takes them one after the other, but the brokers see many in one metadata update instead
    # of one update (and one full snapshot) per topic waited for in turn.
    outcomes = await asyncio.gather(*[create(t) for t in req.topics])
    results = []
    for t, (error, message, info) in zip(req.topics, outcomes, strict=True):
        configs_out: tuple[Any, ...] = ()
        # A topic's configs are shown to who may describe them (Kafka's DESCRIBE_CONFIGS).
        config_error = ErrorCode.none
        if info is not None and config_cls is not None and ctx.denied(Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC,
                                                                      t.name):
            config_error = ErrorCode.topic_authorization_failed
        if info is not None and config_cls is not None and config_error == ErrorCode.none:
            settings = TopicSettings(broker.config, info.configs)
            configs_out = tuple(
                make(config_cls, name=k, value=TOPIC_PROPERTIES[k].render(v), read_only=False,
                     config_source=SOURCE_DYNAMIC_TOPIC if k in info.configs else SOURCE_DEFAULT,
                     is_sensitive=False)
                for k, v in settings.items()
            )
        results.append(make(
            result_cls, name=t.name, topic_id=info.uuid if info and error == ErrorCode.none else NULL_UUID,
            error_code=error, error_message=message, topic_config_error_code=config_error,
            num_partitions=len(info.partitions) if info else -1,
            replication_factor=len(info.partitions[0].replicas) if info else -1, configs=configs_out,
        ))
    return make(cls, throttle_time=ZERO, topics=tuple(results))


def _creatable(ctx: RequestContext, t: Any, seen: set[str], create_any: bool,
               validate_only: bool) -> tuple[int, int, list[list[int]] | None, dict[str, str | None]]:
    """A CreateTopics entry checked (raises KafkaError): partitions, replication factor, assignments,
    configs. Runs before the first await of its creation, so entries are checked in request order."""
    if t.name in seen:
        raise KafkaError(ErrorCode.invalid_request, f"topic {t.name!r} appears twice in the request")
    seen.add(t.name)
    if not create_any and ctx.denied(Operation.CREATE, ResourceType.TOPIC, t.name):
        raise KafkaError(ErrorCode.topic_authorization_failed,
                         f"CREATE on the cluster or on topic {t.name} is not allowed")
    partitions, rf, assignments = t.num_partitions, t.replication_factor, None
    if t.assignments:
        if partitions != -1 or rf != -1:
            raise KafkaError(ErrorCode.invalid_request,
                             "give either replica assignments or partitions/replication factor")
        indexes = sorted(a.partition_index for a in t.assignments)
        if indexes != list(range(len(indexes))):
            raise KafkaError(ErrorCode.invalid_replica_assignment, "partitions must be 0..n-1")
        by_index = {a.partition_index: list(a.broker_ids) for a in t.assignments}
        assignments = [by_index[i] for i in indexes]
        partitions, rf = len(indexes), len(assignments[0])
    if not validate_only:
        _count_mutations(ctx, partitions if partitions > 0 else ctx.broker.config["num.partitions"])
    return partitions, rf, assignments, {c.name: c.value for c in t.configs}


async def handle_delete_topics(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    cls = ctx.response_cls
    result_cls = nested(cls, "DeletableTopicResult")
    if hasattr(req, "topic_names"):
        wanted = [(name, None) for name in req.topic_names]
    else:
        wanted = [(t.name, t.topic_id if t.topic_id != NULL_UUID else None) for t in req.topics]
    results = []
    for name, topic_id in wanted:
        await ctx.turn()
        error, message = ErrorCode.none, None
        try:
            if name is None:
                found = broker.topic_by_id(topic_id) if topic_id else None
                if found is None:
                    raise KafkaError(ErrorCode.unknown_topic_id, f"no topic with id {topic_id}")
                if ctx.denied(Operation.DESCRIBE, ResourceType.TOPIC, found.name):  # its name is not disclosed
                    raise KafkaError(ErrorCode.topic_authorization_failed, f"topic id {topic_id} is not yours to see")
                name = found.name
            if ctx.denied(Operation.DELETE, ResourceType.TOPIC, name):
                raise KafkaError(ErrorCode.topic_authorization_failed, f"DELETE on topic {name} is not allowed")
            existing = broker.topic(name)
            _count_mutations(ctx, len(existing.partitions) if existing is not None else 0)
            info = await broker.delete_topic(name)
            topic_id = info.uuid
        except KafkaError as exc:
            error, message = exc.code, exc.message
        results.append(make(result_cls, name=name, topic_id=topic_id or NULL_UUID, error_code=error,
                            error_message=message))
    return make(cls, throttle_time=ZERO, responses=tuple(results))


async def handle_create_partitions(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    cls = ctx.response_cls
    result_cls = nested(cls, "CreatePartitionsTopicResult")
    results = []
    for t in req.topics:
        await ctx.turn()
        error, message = ErrorCode.none, None
        try:
            if ctx.denied(Operation.ALTER, ResourceType.TOPIC, t.name):
                raise KafkaError(ErrorCode.topic_authorization_failed, f"ALTER on topic {t.name} is not allowed")
            assignments = [list(a.broker_ids) for a in t.assignments] if t.assignments else None
            existing = broker.topic(t.name)
            if not req.validate_only and existing is not None:
                _count_mutations(ctx, t.count - len(existing.partitions))
            await broker.create_partitions(t.name, t.count, req.validate_only, assignments)
        except KafkaError as exc:
            error, message = exc.code, exc.message
        results.append(make(result_cls, name=t.name, error_code=error, error_message=message))
    return make(cls, throttle_time=ZERO, results=tuple(results))


SOURCE_DYNAMIC_BROKER = 2
DESCRIBED_EFFECTIVE = {"listeners", "advertised.listeners"}  # described as in effect, by _kafka_named
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
LIST_TYPE = 7
PASSWORD_TYPE = 9


def _render(value: Any) -> str:
    return "true" if value is True else "false" if value is False else str(value)


def _entry(cls: type, synonym_cls: type | None, name: str, levels: list[tuple[str, Any, int]], kind: str,
           doc: str, documentation: bool, synonyms: bool, read_only: bool = False, secret: bool = False) -> Any:
    """One config entry; `levels` are (name, value, source) from the highest priority down, the
    first being the value in effect (Kafka's synonyms). A secret (password, key) is described as
    sensitive with no value, as Kafka does."""
    _, value, source = levels[0]

    def shown(v: Any) -> str | None:
        return None if secret else _render(v)

    synonym_entries = tuple(make(synonym_cls, name=n, value=shown(v), source=src) for n, v, src in levels) \
        if synonyms and synonym_cls is not None else ()
    config_type = (PASSWORD_TYPE if secret else LIST_TYPE if kind == "list" else CONFIG_TYPES.get(kind, 0))
    return make(cls, name=name, value=shown(value), read_only=read_only, config_source=source,
                is_default=source == SOURCE_DEFAULT, is_sensitive=secret, synonyms=synonym_entries,
                config_type=config_type, documentation=doc if documentation else None)


LEVEL_SOURCES = {"dynamic_broker": SOURCE_DYNAMIC_BROKER, "dynamic_default": SOURCE_DYNAMIC_DEFAULT_BROKER,
                 "static": SOURCE_STATIC_BROKER, "default": SOURCE_DEFAULT}


def broker_levels(broker: ConfigLevels, name: str) -> list[tuple[str, Any, int]]:
    """Where a broker property's value comes from, highest priority first, as synonyms."""
    return [(name, value, LEVEL_SOURCES[level]) for value, level in broker.config_levels(name)]


def _kafka_named(broker: BrokerIdentity) -> list[tuple[str, list[tuple[str, Any, int]], str]]:
    """Kafka's names for what dm configures under its own (tools ask for these)."""
    c = broker.config
    static = SOURCE_STATIC_BROKER
    listeners = broker.security.listeners.listeners
    bound = ",".join(f"{li.name}://{li.host}:{broker.bound_ports.get(li.name, li.port)}" for li in listeners)
    advertised = ",".join(f"{name}://{e.host}:{e.port}" for name, e in broker.registration().listeners.items())
    return [
        ("broker.id", [("broker.id", broker.node_id, static), ("node.id", broker.node_id, static)],
         "The broker id (dm: node.id)."),
        ("listeners", [("listeners", bound, static)],
         "The listeners, as bound (from listeners, or dm's listener.host and listener.port)."),
        ("advertised.listeners", [("advertised.listeners", advertised, static)],
         "The endpoints clients are told to use, per listener."),
        ("log.dir", [("log.dir", str(c.data_dir), static), ("log.dirs", ",".join(map(str, c.log_dirs)), static)],
         "The first log directory (dm: log.dirs, which lists them all)."),
    ]


async def handle_describe_configs(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    cls = ctx.response_cls
    result_cls = nested(cls, "DescribeConfigsResult")
    entry_cls = nested(cls, "DescribeConfigsResourceResult")
    synonym_cls = nested_optional(cls, "DescribeConfigsSynonym")
    documentation = getattr(req, "include_documentation", False)
    synonyms = getattr(req, "include_synonyms", False)
    results = []
    for res in req.resources:
        await ctx.turn()
        error, message, entries = ErrorCode.none, None, []
        keys = set(res.configuration_keys) if res.configuration_keys else None
        if res.resource_type == RESOURCE_TOPIC and ctx.denied(Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC,
                                                              res.resource_name):
            error, message = ErrorCode.topic_authorization_failed, "DESCRIBE_CONFIGS on the topic is not allowed"
        elif res.resource_type == RESOURCE_BROKER and ctx.denied(Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER,
                                                                 CLUSTER_NAME):
            error, message = ErrorCode.cluster_authorization_failed, "DESCRIBE_CONFIGS on the cluster is not allowed"
        elif res.resource_type == RESOURCE_GROUP and ctx.denied(Operation.DESCRIBE_CONFIGS, ResourceType.GROUP,
                                                                res.resource_name):
            error, message = ErrorCode.group_authorization_failed, "DESCRIBE_CONFIGS on the group is not allowed"
        elif res.resource_type == RESOURCE_GROUP:
            entries = _group_entries(broker, res.resource_name, keys, entry_cls, synonym_cls, documentation, synonyms)
        elif res.resource_type == RESOURCE_TOPIC:
            topic = broker.topic(res.resource_name)
            settings = broker.topic_settings(res.resource_name)
            if topic is None or settings is None:
                error, message = ErrorCode.unknown_topic_or_partition, f"topic {res.resource_name!r} does not exist"
            else:
                for name, value in settings.items():
                    if keys is not None and name not in keys:
                        continue
                    prop = TOPIC_PROPERTIES[name]
                    levels = [(name, value, SOURCE_DYNAMIC_TOPIC)] if name in topic.configs else []
                    if name in TOPIC_TO_BROKER:
                        levels += broker_levels(broker, TOPIC_TO_BROKER[name])
                    else:
                        levels.append((name, prop.default, SOURCE_DEFAULT))
                    doc = prop.doc if prop.applied else f"Accepted and stored; dm does not act on it: {prop.doc}"
                    entries.append(_entry(entry_cls, synonym_cls, name, levels, prop.kind, doc, documentation,
                                          synonyms))
        elif res.resource_type == RESOURCE_BROKER:
            if res.resource_name == "":
                # The cluster-wide dynamic defaults, as Kafka describes the empty broker name.
                for name, value in sorted(broker.dynamic_configs().get("", {}).items()):
                    if keys is None or name in keys:
                        prop = BROKER_PROPERTIES[name]
                        entries.append(_entry(entry_cls, synonym_cls, name,
                                              [(name, prop.parse(value), SOURCE_DYNAMIC_DEFAULT_BROKER)], prop.kind,
                                              prop.doc, documentation, synonyms))
            elif res.resource_name != str(broker.node_id):
                error, message = ErrorCode.invalid_request, f"this is broker {broker.node_id}; ask broker " \
                                                            f"{res.resource_name} for its configs"
            else:
                for name, prop in BROKER_PROPERTIES.items():
                    if (keys is not None and name not in keys) or name in DESCRIBED_EFFECTIVE:
                        continue
                    entries.append(_entry(entry_cls, synonym_cls, name, broker_levels(broker, name), prop.kind,
                                          prop.doc, documentation, synonyms, read_only=not prop.dynamic,
                                          secret=prop.secret))
                for name, levels, doc in _kafka_named(broker):
                    if keys is None or name in keys:
                        entries.append(_entry(entry_cls, synonym_cls, name, levels, "str", doc, documentation,
                                              synonyms, read_only=True))
        else:
            error, message = ErrorCode.invalid_request, f"unsupported resource type {res.resource_type}"
        await ctx.turn(len(entries))
        results.append(make(result_cls, error_code=error, error_message=message, resource_type=res.resource_type,
                            resource_name=res.resource_name, configs=tuple(entries)))
    return make(cls, throttle_time=ZERO, results=tuple(results))


def _group_entries(broker: ConfigLevels, group: str, keys: set[str] | None, entry_cls: type, synonym_cls: type | None,
                   documentation: bool, synonyms: bool) -> list[Any]:
    """A group's configs: its own values (GROUP_CONFIG), else the broker's or dm's default."""
    entries = []
    own = broker.group_configs(group)
    for name, prop in GROUP_PROPERTIES.items():
        if keys is not None and name not in keys:
            continue
        levels = [(name, prop.parse(own[name]), SOURCE_GROUP)] if name in own else []
        if name in GROUP_TO_BROKER:
            levels += broker_levels(broker, GROUP_TO_BROKER[name])
        else:
            levels.append((name, prop.default, SOURCE_DEFAULT))
        entries.append(_entry(entry_cls, synonym_cls, name, levels, prop.kind, prop.doc, documentation, synonyms))
    return entries


def _group_configs(broker: ConfigLevels, changes: Any) -> dict[str, str | None]:
    """SET and DELETE of group configs, checked against the broker's bounds before the controller stores them."""
    out: dict[str, str | None] = {}
    for c in changes:
        if c.config_operation not in (OP_SET, OP_DELETE):
            raise KafkaError(ErrorCode.invalid_config, f"{c.name}: APPEND and SUBTRACT apply to list configs only")
        prop = GROUP_PROPERTIES.get(c.name)
        if prop is None:
            raise KafkaError(ErrorCode.invalid_config, f"{c.name}: not a group config dm has (it has "
                                                       f"{', '.join(sorted(GROUP_PROPERTIES))})")
        if c.config_operation == OP_DELETE:
            out[c.name] = None
            continue
        try:
            value = prop.parse(c.value)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
        if c.name in GROUP_TO_BROKER:  # within the broker's bounds, as Kafka checks group configs
            kind, what = GROUP_TO_BROKER[c.name].removeprefix("group.").split(".", 1)
            low, high = (broker.config[f"group.{kind}.{m}.{what}"] for m in ("min", "max"))
            if not low <= value <= high:
                raise KafkaError(ErrorCode.invalid_config, f"{c.name}={value} must lie between "
                                                           f"group.{kind}.min.{what}={low} and "
                                                           f"group.{kind}.max.{what}={high}")
        out[c.name] = prop.render(value)
    return out


def _list_op(current: str, value: str, append: bool) -> str:
    items = [x for x in current.split(",") if x]
    for item in (x.strip() for x in value.split(",") if x.strip()):
        if append and item not in items:
            items.append(item)
        elif not append and item in items:
            items.remove(item)
    return ",".join(items)


def _is_list(name: str) -> bool:
    prop = TOPIC_PROPERTIES.get(name)
    return prop is not None and (prop.kind == "list" or name == "cleanup.policy")


def _topic(broker: TopicLookup, name: str) -> TopicDoc:
    topic = broker.topic(name)
    if topic is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
    return topic


async def _alter_topic(broker: TopicConfigs, name: str, configs: dict[str, str], validate_only: bool) -> None:
    try:
        normalised = validate_topic_configs(configs)
    except ConfigError as exc:
        raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
    await broker.alter_topic_configs(name, normalised, validate_only=validate_only)


async def _alter_each(ctx: RequestContext, req: Any, alter: Callable[[Any], Awaitable[None]],
                      resource_types: tuple[int, ...] = (RESOURCE_TOPIC, RESOURCE_BROKER)) -> Any:
    """AlterConfigs and IncrementalAlterConfigs: `alter` each topic or broker resource; its
    KafkaError is that resource's result."""
    cls = ctx.response_cls
    result_cls = nested(cls, "AlterConfigsResourceResponse")
    results = []
    for res in req.resources:
        await ctx.turn(1 + len(res.configs))
        error, message = ErrorCode.none, None
        try:
            if res.resource_type not in resource_types:
                why = " (group configs are changed with IncrementalAlterConfigs)" if res.resource_type == \
                    RESOURCE_GROUP else ""
                raise KafkaError(ErrorCode.invalid_request, f"unsupported resource type {res.resource_type}{why}")
            if res.resource_type == RESOURCE_GROUP and ctx.denied(Operation.ALTER_CONFIGS, ResourceType.GROUP,
                                                                  res.resource_name):
                raise KafkaError(ErrorCode.group_authorization_failed, "ALTER_CONFIGS on the group is not allowed")
            if res.resource_type == RESOURCE_TOPIC and ctx.denied(Operation.ALTER_CONFIGS, ResourceType.TOPIC,
                                                                  res.resource_name):
                raise KafkaError(ErrorCode.topic_authorization_failed, "ALTER_CONFIGS on the topic is not allowed")
            if res.resource_type == RESOURCE_BROKER and ctx.denied(Operation.ALTER_CONFIGS, ResourceType.CLUSTER,
                                                                   CLUSTER_NAME):
                raise KafkaError(ErrorCode.cluster_authorization_failed,
                                 "ALTER_CONFIGS on the cluster is not allowed")
            await alter(res)
        except KafkaError as exc:
            error, message = exc.code, exc.message
        results.append(make(result_cls, error_code=error, error_message=message, resource_type=res.resource_type,
                            resource_name=res.resource_name))
    return make(cls, throttle_time=ZERO, responses=tuple(results))


async def handle_alter_configs(ctx: RequestContext, req: Any) -> Any:
    """AlterConfigs (the older API): the given configs replace the resource's whole set."""
    broker = ctx.broker

    async def replace(res: Any) -> None:
        configs = {c.name: c.value for c in res.configs}
        if any(v is None for v in configs.values()):
            raise KafkaError(ErrorCode.invalid_config, "AlterConfigs needs a value for every config")
        if res.resource_type == RESOURCE_TOPIC:
            await _alter_topic(broker, _topic(broker, res.resource_name).name, configs, req.validate_only)
        else:
            await broker.alter_broker_configs(res.resource_name, configs, replace=True,
                                              validate_only=req.validate_only)

    return await _alter_each(ctx, req, replace)


def _incremental_topic_configs(broker: TopicConfigs, topic: TopicDoc, changes: Any) -> dict[str, str]:
    """The topic's overrides after SET, DELETE, APPEND and SUBTRACT operations."""
    configs = dict(topic.configs)
    settings = broker.topic_settings(topic.name)
    for c in changes:
        if c.config_operation == OP_SET:
            configs[c.name] = c.value
        elif c.config_operation == OP_DELETE:
            configs.pop(c.name, None)
        elif c.config_operation in (OP_APPEND, OP_SUBTRACT):
            if not _is_list(c.name):
                raise KafkaError(ErrorCode.invalid_config, f"{c.name}: APPEND and SUBTRACT apply to list configs only")
            current = configs.get(c.name, TOPIC_PROPERTIES[c.name].render(settings[c.name]))
            # An empty list is a value too (cleanup.policy="": neither retention nor compaction), as in Kafka.
            configs[c.name] = _list_op(current, c.value or "", c.config_operation == OP_APPEND)
        else:
            raise KafkaError(ErrorCode.invalid_request, f"unknown operation {c.config_operation}")
    return configs


def _incremental_broker_configs(changes: Any) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for c in changes:
        if c.config_operation not in (OP_SET, OP_DELETE):
            raise KafkaError(ErrorCode.invalid_config, f"{c.name}: APPEND and SUBTRACT apply to list configs only")
        out[c.name] = c.value if c.config_operation == OP_SET else None
    return out


async def handle_incremental_alter_configs(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker

    async def apply(res: Any) -> None:
        if res.resource_type == RESOURCE_TOPIC:
            topic = _topic(broker, res.resource_name)
            await _alter_topic(broker, topic.name, _incremental_topic_configs(broker, topic, res.configs),
                               req.validate_only)
        elif res.resource_type == RESOURCE_GROUP:
            await broker.alter_group_configs(res.resource_name, _group_configs(broker, res.configs), req.validate_only)
        else:
            await broker.alter_broker_configs(res.resource_name, _incremental_broker_configs(res.configs),
                                              replace=False, validate_only=req.validate_only)

    return await _alter_each(ctx, req, apply, (RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_GROUP))


async def handle_init_producer_id(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    pid, epoch = getattr(req, "producer_id", -1), getattr(req, "producer_epoch", -1)
    if (pid == -1) != (epoch == -1):  # Kafka's rule: a producer id and its epoch, or neither
        return make(cls, throttle_time=ZERO, error_code=ErrorCode.invalid_request, producer_id=-1, producer_epoch=-1)
    if req.transactional_id is not None:
        if ctx.denied(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
            return make(cls, throttle_time=ZERO, error_code=ErrorCode.transactional_id_authorization_failed,
                        producer_id=-1, producer_epoch=-1)
        return await init_transactional_producer(ctx, req, None if pid == -1 else (pid, epoch))
    # Kafka's rule: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic.
    if not ctx.allowed(Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME) and \
            not ctx.allowed_any(Operation.WRITE, ResourceType.TOPIC):
        ctx.broker.metrics.authorization_denials.labels(ctx.api).inc()
        return make(cls, throttle_time=ZERO, error_code=ErrorCode.cluster_authorization_failed, producer_id=-1,
                    producer_epoch=-1)
    # Without a transactional id nothing says whose a producer id is: an idempotent producer always gets a new
    # one, whatever id and epoch it names (as Kafka answers; a producer bumping its epoch after a sequence
    # error, KIP-360, takes the new id). Bumping the named one instead handed one id to two producers, and the
    # second one's batches were acknowledged as duplicates of the first one's without being written.
    try:
        pid = await ctx.broker.allocate_producer_id()
    except Exception as exc:  # the controller is unreachable: the client retries
        log.warning("cannot allocate a producer id: %s", exc)
        return make(cls, throttle_time=ZERO, error_code=ErrorCode.coordinator_not_available, producer_id=-1,
                    producer_epoch=-1)
    return make(cls, throttle_time=ZERO, error_code=ErrorCode.none, producer_id=pid, producer_epoch=0)
