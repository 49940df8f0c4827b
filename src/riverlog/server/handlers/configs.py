"""Configs: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs for topics and brokers.

Topic configs are Kafka's topic-level names (validated by `LogConfig`); overrides live in the
metadata store (`/config/topics/<name>`) and take effect on the topic's logs at once. Broker
configs are `server.properties` and `--override` under the dynamic ones of `/config/brokers`
(`server/broker_configs.py`): a BROKER resource named by a broker id is that broker's own
(only that broker answers for it, as in Kafka), the empty name is the cluster default. Every
value is described with its source (v1+) and, when asked, its synonyms; from v3 with its
Kafka type (`config_type`) and, when asked, Kafka's documentation (`server/config_docs.py`).
A broker key without a value (`advertised.listeners` unset) is listed with a null value.
BROKER_LOGGER resources (this broker's log levels) are served by
`server/broker_loggers.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from riverlog.protocol import error_codes
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from riverlog.server import broker_configs as bc
from riverlog.server import broker_loggers, config_docs
from riverlog.server.dispatch import RequestContext
from riverlog.storage.log_config import InvalidConfigError, LogConfig

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

TOPIC = 2
BROKER = 4
DYNAMIC_BROKER_LOGGER_CONFIG = 6  # a config source
# IncrementalAlterConfigs operations.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

Entry = DescribeConfigsResponse.DescribeConfigsResourceResult


def _entry(
    name: str,
    value: str | None,
    synonyms: list[bc.Synonym],
    *,
    read_only: bool,
    version: int,
    include_synonyms: bool,
    include_documentation: bool = False,
) -> Entry:
    source = bc.source_of(synonyms)
    return Entry(
        name=name,
        value=value,
        read_only=read_only,
        is_default=source == bc.DEFAULT_CONFIG and version == 0,
        config_source=source,
        is_sensitive=False,
        synonyms=[
            DescribeConfigsResponse.DescribeConfigsSynonym(
                name=s.name, value=s.value, source=s.source
            )
            for s in synonyms
        ]
        if include_synonyms
        else [],
        config_type=config_docs.CONFIG_TYPES.get(name, config_docs.UNKNOWN),
        documentation=config_docs.DOCUMENTATION.get(name) if include_documentation else None,
    )


def _topic_entries(
    broker: Broker,
    name: str,
    keys: list[str] | None,
    version: int,
    include_synonyms: bool,
    include_documentation: bool = False,
) -> list[Entry]:
    topic = broker.topics.get(name)
    if topic is None:
        raise KafkaError(error_codes.UNKNOWN_TOPIC_OR_PARTITION)
    effective = LogConfig.from_map({**broker.topic_defaults, **topic.config}).to_map()
    layers = broker.dynamic_configs.layers
    return [
        _entry(
            key,
            value,
            bc.topic_synonyms(key, topic.config, layers),
            read_only=False,
            version=version,
            include_synonyms=include_synonyms,
            include_documentation=include_documentation,
        )
        for key, value in sorted(effective.items())
        if keys is None or key in keys
    ]


def _broker_entries(
    broker: Broker,
    resource_name: str,
    keys: list[str] | None,
    version: int,
    include_synonyms: bool,
    include_documentation: bool = False,
) -> list[Entry]:
    """A broker's every config, or (empty name) the cluster's dynamic defaults."""
    layers = broker.dynamic_configs.layers
    if resource_name == "":
        values: dict[str, str | None] = dict(layers.cluster_default)
        only_default = bc.Layers({}, layers.cluster_default, {})
        synonyms = {k: bc.broker_synonyms(k, only_default) for k in values}
    elif resource_name == str(broker.broker_id):
        unset = {k: None for k, v in broker.config.values.items() if v is None}
        values = {**unset, **broker.config.as_strings()}  # no value: listed with null
        synonyms = {k: bc.broker_synonyms(k, layers) for k in values}
    else:
        raise KafkaError(
            error_codes.INVALID_REQUEST,
            f"Unexpected broker id, expected "
            f"{broker.broker_id} or empty string, but received {resource_name}",
        )
    return [
        _entry(
            key,
            value,
            synonyms[key],
            read_only=key not in bc.DYNAMIC_KEYS,
            version=version,
            include_synonyms=include_synonyms,
            include_documentation=include_documentation,
        )
        for key, value in sorted(values.items())
        if keys is None or key in keys
    ]


def _logger_entries(broker: Broker, resource_name: str, keys: list[str] | None) -> list[Entry]:
    broker_loggers.check_broker(resource_name, broker.broker_id)
    return [
        Entry(
            name=name,
            value=level,
            read_only=False,
            is_default=False,
            config_source=DYNAMIC_BROKER_LOGGER_CONFIG,
            is_sensitive=False,
            synonyms=[],
        )
        for name, level in broker_loggers.describe(keys)
    ]


def handle_describe_configs(broker: Broker, ctx: RequestContext) -> DescribeConfigsResponse:
    request = ctx.request.body
    assert isinstance(request, DescribeConfigsRequest)
    results = []
    for resource in request.resources:
        result = DescribeConfigsResponse.DescribeConfigsResult(
            resource_type=resource.resource_type, resource_name=resource.resource_name, configs=[]
        )
        try:
            if resource.resource_type == TOPIC:
                result.configs = _topic_entries(
                    broker,
                    resource.resource_name,
                    resource.configuration_keys,
                    ctx.version,
                    request.include_synonyms,
                    request.include_documentation,
                )
            elif resource.resource_type == BROKER:
                result.configs = _broker_entries(
                    broker,
                    resource.resource_name,
                    resource.configuration_keys,
                    ctx.version,
                    request.include_synonyms,
                    request.include_documentation,
                )
            elif resource.resource_type == broker_loggers.BROKER_LOGGER:
                result.configs = _logger_entries(
                    broker, resource.resource_name, resource.configuration_keys
                )
            else:
                raise KafkaError(
                    error_codes.INVALID_REQUEST,
                    f"Unsupported resource type {resource.resource_type}.",
                )
        except KafkaError as e:
            result.error_code = e.code
            result.error_message = e.message
        results.append(result)
    return DescribeConfigsResponse(results=results)


def _alter_topic(broker: Broker, name: str, new: dict[str, str], validate_only: bool) -> None:
    if broker.topics.get(name) is None:
        raise KafkaError(error_codes.UNKNOWN_TOPIC_OR_PARTITION)
    try:
        LogConfig.from_map({**broker.topic_defaults, **new})
    except InvalidConfigError as e:
        raise KafkaError(error_codes.INVALID_CONFIG, str(e)) from None
    if not validate_only:
        broker.set_topic_config(name, new)


def _broker_entity(broker: Broker, resource_name: str) -> str:
    """The `/config/brokers` child a BROKER resource changes: this broker's id (only it
    changes its own, as in Kafka) or `<default>` for the empty name."""
    if resource_name not in ("", str(broker.broker_id)):
        raise KafkaError(
            error_codes.INVALID_REQUEST,
            f"Unexpected broker id, expected {broker.broker_id}, but received {resource_name}",
        )
    return bc.entity_name(resource_name)


def _alter_broker(broker: Broker, name: str, new: dict[str, str], validate_only: bool) -> None:
    entity = _broker_entity(broker, name)
    if validate_only:
        broker.dynamic_configs.validate(entity, new)
    else:
        broker.set_broker_config(entity, new)


def _current(
    broker: Broker, resource_type: int, name: str
) -> tuple[dict[str, str], dict[str, str]]:
    """A resource's overrides now, and the values that apply where it has none."""
    if resource_type == TOPIC:
        topic = broker.topics.get(name)
        if topic is None:
            raise KafkaError(error_codes.UNKNOWN_TOPIC_OR_PARTITION)
        return topic.config, broker.topic_defaults
    if resource_type == BROKER:
        layers = broker.dynamic_configs.layers
        entity = _broker_entity(broker, name)
        own = layers.cluster_default if entity == bc.DEFAULT_ENTITY else layers.per_broker
        return dict(own), broker.config.as_strings()
    raise KafkaError(error_codes.INVALID_REQUEST, f"Unsupported resource type {resource_type}.")


AlterResource = (
    AlterConfigsRequest.AlterConfigsResource | IncrementalAlterConfigsRequest.AlterConfigsResource
)
AnswerClass = (
    type[AlterConfigsResponse.AlterConfigsResourceResponse]
    | type[IncrementalAlterConfigsResponse.AlterConfigsResourceResponse]
)


def _alter_each(
    broker: Broker,
    resources: Sequence[AlterResource],
    answer_cls: AnswerClass,
    new_config: Callable[[Any], dict[str, str]],
    validate_only: bool,
) -> list[Any]:
    """Apply `new_config(resource)` to each topic or broker resource; one answer each."""
    answers = []
    for r in resources:
        answer = answer_cls(resource_type=r.resource_type, resource_name=r.resource_name)
        try:
            if r.resource_type == TOPIC:
                _alter_topic(broker, r.resource_name, new_config(r), validate_only)
            elif r.resource_type == BROKER:
                _alter_broker(broker, r.resource_name, new_config(r), validate_only)
            else:
                raise KafkaError(
                    error_codes.INVALID_REQUEST, f"Unsupported resource type {r.resource_type}."
                )
        except KafkaError as e:
            answer.error_code, answer.error_message = e.code, e.message
        answers.append(answer)
    return answers


def handle_alter_configs(broker: Broker, ctx: RequestContext) -> AlterConfigsResponse:
    """AlterConfigs replaces a topic's or broker's whole override set."""
    request = ctx.request.body
    assert isinstance(request, AlterConfigsRequest)

    def replaced(r: AlterConfigsRequest.AlterConfigsResource) -> dict[str, str]:
        return {c.name: c.value for c in r.configs if c.value is not None}

    answers = _alter_each(
        broker,
        request.resources,
        AlterConfigsResponse.AlterConfigsResourceResponse,
        replaced,
        request.validate_only,
    )
    return AlterConfigsResponse(responses=answers)


def _apply_operations(
    current_config: dict[str, str],
    defaults: dict[str, str],
    r: IncrementalAlterConfigsRequest.AlterConfigsResource,
) -> dict[str, str]:
    """Kafka's semantics: APPEND and SUBTRACT start from the effective value (the default
    when the resource has no override)."""
    new = dict(current_config)
    for c in r.configs:
        effective = new.get(c.name, defaults.get(c.name, ""))
        current = [v for v in effective.split(",") if v]
        values = [v for v in (c.value or "").split(",") if v]
        if c.config_operation == SET:
            new[c.name] = c.value or ""
        elif c.config_operation == DELETE:
            new.pop(c.name, None)
        elif c.config_operation == APPEND:
            new[c.name] = ",".join(current + [v for v in values if v not in current])
        elif c.config_operation == SUBTRACT:
            new[c.name] = ",".join(v for v in current if v not in values)
        else:
            raise KafkaError(
                error_codes.INVALID_REQUEST, f"Unknown operation {c.config_operation}."
            )
    return new


def handle_incremental_alter_configs(
    broker: Broker, ctx: RequestContext
) -> IncrementalAlterConfigsResponse:
    """IncrementalAlterConfigs sets, deletes, appends to or subtracts from single keys."""
    request = ctx.request.body
    assert isinstance(request, IncrementalAlterConfigsRequest)

    def updated(r: IncrementalAlterConfigsRequest.AlterConfigsResource) -> dict[str, str]:
        own, defaults = _current(broker, r.resource_type, r.resource_name)
        return _apply_operations(own, defaults, r)

    answer_cls = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
    answers = []
    for r in request.resources:
        if r.resource_type != broker_loggers.BROKER_LOGGER:
            answers += _alter_each(broker, [r], answer_cls, updated, request.validate_only)
            continue
        answer = answer_cls(resource_type=r.resource_type, resource_name=r.resource_name)
        try:
            broker_loggers.check_broker(r.resource_name, broker.broker_id)
            broker_loggers.alter(
                [(c.name, c.config_operation, c.value) for c in r.configs], request.validate_only
            )
        except KafkaError as e:
            answer.error_code, answer.error_message = e.code, e.message
        answers.append(answer)
    return IncrementalAlterConfigsResponse(responses=answers)
