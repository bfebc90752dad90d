"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs,
IncrementalAlterConfigs."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from ...config import BROKER_PROPERTIES, TOPIC_PROPERTIES, TOPIC_TO_BROKER, ConfigError, validate_topic_configs
from ...errors import KafkaError
from ..build import ZERO, make, nested
from ..dispatch import RequestContext

NULL_UUID = uuid.UUID(int=0)
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
CONFIG_TYPES = {"bool": 1, "str": 2, "choice": 2, "int": 5}  # BOOLEAN, STRING, LONG
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


async def handle_create_topics(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    cls = ctx.response_cls
    result_cls = nested(cls, "CreatableTopicResult")
    config_cls = nested(cls, "CreatableTopicConfigs") if "configs" in result_cls.__dataclass_fields__ else None
    results = []
    seen: set[str] = set()
    for t in req.topics:
        error, message, info = ErrorCode.none, None, None
        try:
            if t.name in seen:
                raise KafkaError(ErrorCode.invalid_request, f"topic {t.name!r} appears twice in the request")
            seen.add(t.name)
            partitions, rf = t.num_partitions, t.replication_factor
            if t.assignments:
                if partitions != -1 or rf != -1:
                    raise KafkaError(ErrorCode.invalid_request,
                                     "give either replica assignments or partitions/replication factor")
                known = {e.node_id for e in broker.endpoints()}
                for a in t.assignments:
                    if not a.broker_ids or set(a.broker_ids) - known or len(set(a.broker_ids)) != len(a.broker_ids):
                        raise KafkaError(ErrorCode.invalid_replica_assignment,
                                         f"partition {a.partition_index}: invalid brokers {list(a.broker_ids)}")
                indexes = sorted(a.partition_index for a in t.assignments)
                if indexes != list(range(len(indexes))):
                    raise KafkaError(ErrorCode.invalid_replica_assignment, "partitions must be 0..n-1")
                partitions, rf = len(indexes), len(t.assignments[0].broker_ids)
            configs = {c.name: c.value for c in t.configs}
            info = broker.create_topic(t.name, partitions, rf, configs, validate_only=req.validate_only)
        except KafkaError as exc:
            error, message = exc.code, exc.message
        configs_out: tuple[Any, ...] = ()
        if info is not None and config_cls is not None:
            settings = broker.topic_settings(t.name) if not req.validate_only else None
            values = settings.items() if settings else []
            configs_out = tuple(
                make(config_cls, name=k, value=TOPIC_PROPERTIES[k].render(v), read_only=False,
                     config_source=SOURCE_DYNAMIC_TOPIC if k in info.configs else SOURCE_DEFAULT,
                     is_sensitive=False)
                for k, v in values
            )
        results.append(make(
            result_cls, name=t.name, topic_id=info.uuid if info and error == ErrorCode.none else NULL_UUID,
            error_code=error, error_message=message, topic_config_error_code=0,
            num_partitions=info.partitions if info else -1,
            replication_factor=info.replication_factor if info else -1, configs=configs_out,
        ))
    return make(cls, throttle_time=ZERO, topics=tuple(results))


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
        error, message = ErrorCode.none, None
        try:
            if name is None:
                found = broker.store.by_id(topic_id) if topic_id else None
                if found is None:
                    raise KafkaError(ErrorCode.unknown_topic_id, f"no topic with id {topic_id}")
                name = found.name
            info = broker.delete_topic(name)
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
        error, message = ErrorCode.none, None
        try:
            if t.assignments:
                known = {e.node_id for e in broker.endpoints()}
                if any(set(a.broker_ids) - known for a in t.assignments):
                    raise KafkaError(ErrorCode.invalid_replica_assignment, "assignment names unknown brokers")
            broker.create_partitions(t.name, t.count, req.validate_only)
        except KafkaError as exc:
            error, message = exc.code, exc.message
        results.append(make(result_cls, name=t.name, error_code=error, error_message=message))
    return make(cls, throttle_time=ZERO, results=tuple(results))


def _entry(cls: type, name: str, value: Any, source: int, kind: str, doc: str, documentation: bool) -> Any:
    rendered = "true" if value is True else "false" if value is False else str(value)
    return make(cls, name=name, value=rendered, read_only=False, config_source=source, is_default=source ==
                SOURCE_DEFAULT, is_sensitive=False, synonyms=(), config_type=CONFIG_TYPES.get(kind, 0),
                documentation=doc if documentation else None)


async def handle_describe_configs(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    cls = ctx.response_cls
    result_cls = nested(cls, "DescribeConfigsResult")
    entry_cls = nested(cls, "DescribeConfigsResourceResult")
    documentation = getattr(req, "include_documentation", False)
    results = []
    for res in req.resources:
        error, message, entries = ErrorCode.none, None, []
        keys = set(res.configuration_keys) if res.configuration_keys else None
        if res.resource_type == RESOURCE_TOPIC:
            topic = broker.store.get(res.resource_name)
            settings = broker.topic_settings(res.resource_name)
            if topic is None or settings is None:
                error, message = ErrorCode.unknown_topic_or_partition, f"topic {res.resource_name!r} does not exist"
            else:
                for name, value in settings.items():
                    if keys is not None and name not in keys:
                        continue
                    prop = TOPIC_PROPERTIES[name]
                    if name in topic.configs:
                        source = SOURCE_DYNAMIC_TOPIC
                    elif TOPIC_TO_BROKER[name] in broker.config.explicit:
                        source = SOURCE_STATIC_BROKER
                    else:
                        source = SOURCE_DEFAULT
                    entries.append(_entry(entry_cls, name, value, source, prop.kind, prop.doc, documentation))
        elif res.resource_type == RESOURCE_BROKER:
            if res.resource_name not in ("", str(broker.node_id)):
                error, message = ErrorCode.invalid_request, f"this is broker {broker.node_id}"
            else:
                for name, prop in BROKER_PROPERTIES.items():
                    if keys is not None and name not in keys:
                        continue
                    source = SOURCE_STATIC_BROKER if name in broker.config.explicit else SOURCE_DEFAULT
                    entries.append(_entry(entry_cls, name, broker.config[name], source, prop.kind, prop.doc,
                                          documentation))
        else:
            error, message = ErrorCode.invalid_request, f"unsupported resource type {res.resource_type}"
        results.append(make(result_cls, error_code=error, error_message=message, resource_type=res.resource_type,
                            resource_name=res.resource_name, configs=tuple(entries)))
    return make(cls, throttle_time=ZERO, results=tuple(results))


async def handle_incremental_alter_configs(ctx: RequestContext, req: Any) -> Any:
    broker = ctx.broker
    cls = ctx.response_cls
    result_cls = nested(cls, "AlterConfigsResourceResponse")
    results = []
    for res in req.resources:
        error, message = ErrorCode.none, None
        try:
            if res.resource_type != RESOURCE_TOPIC:
                raise KafkaError(ErrorCode.invalid_request, "only topic configs can be altered at run time")
            topic = broker.store.get(res.resource_name)
            if topic is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {res.resource_name!r} does not exist")
            configs = dict(topic.configs)
            for c in res.configs:
                if c.config_operation == OP_SET:
                    configs[c.name] = c.value
                elif c.config_operation == OP_DELETE:
                    configs.pop(c.name, None)
                else:
                    raise KafkaError(ErrorCode.invalid_config, f"{c.name}: APPEND/SUBTRACT apply to list configs only")
            try:
                normalised = validate_topic_configs(configs)
            except ConfigError as exc:
                raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
            if not req.validate_only:
                broker.alter_topic_configs(topic.name, normalised)
        except KafkaError as exc:
            error, message = exc.code, exc.message
        results.append(make(result_cls, error_code=error, error_message=message, resource_type=res.resource_type,
                            resource_name=res.resource_name))
    return make(cls, throttle_time=ZERO, responses=tuple(results))


async def handle_init_producer_id(ctx: RequestContext, req: Any) -> Any:
    cls = ctx.response_cls
    if req.transactional_id is not None:
        # Transactions are not implemented; this error makes clients fail clearly, not hang.
        return make(cls, throttle_time=ZERO, error_code=ErrorCode.transactional_id_authorization_failed,
                    producer_id=-1, producer_epoch=-1)
    pid = getattr(req, "producer_id", -1)
    epoch = getattr(req, "producer_epoch", -1)
    if pid >= 0 and 0 <= epoch < 32766:
        # KIP-360: an idempotent producer bumps its epoch after an unresolved sequence error.
        return make(cls, throttle_time=ZERO, error_code=ErrorCode.none, producer_id=pid, producer_epoch=epoch + 1)
    return make(cls, throttle_time=ZERO, error_code=ErrorCode.none, producer_id=ctx.broker.allocate_producer_id(),
                producer_epoch=0)
