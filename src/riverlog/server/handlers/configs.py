"""Configs: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs for topics and the broker.

Topic configs are Kafka's topic-level names (validated by `LogConfig`); overrides live in the
metadata store (`/config/topics/<name>`) and take effect on the topic's logs at once. Broker
configs are described (read-only: they come from `server.properties` and `--override`).
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
from riverlog.server.dispatch import RequestContext
from riverlog.storage.log_config import InvalidConfigError, LogConfig

if TYPE_CHECKING:
    from riverlog.server.broker import Broker

TOPIC = 2
BROKER = 4
# ConfigSource values of DescribeConfigs v1+.
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
# IncrementalAlterConfigs operations.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

Entry = DescribeConfigsResponse.DescribeConfigsResourceResult


def _topic_entries(broker: Broker, name: str, keys: list[str] | None, version: int) -> list[Entry]:
    topic = broker.topics.get(name)
    if topic is None:
        raise KafkaError(error_codes.UNKNOWN_TOPIC_OR_PARTITION)
    effective = LogConfig.from_map({**broker.topic_defaults, **topic.config}).to_map()
    entries = []
    for key, value in sorted(effective.items()):
        if keys is not None and key not in keys:
            continue
        overridden = key in topic.config
        entries.append(
            Entry(
                name=key,
                value=value,
                read_only=False,
                is_default=not overridden and version == 0,
                config_source=DYNAMIC_TOPIC_CONFIG if overridden else DEFAULT_CONFIG,
                is_sensitive=False,
                synonyms=[],
            )
        )
    return entries


def _broker_entries(broker: Broker, keys: list[str] | None) -> list[Entry]:
    entries = []
    for key, value in sorted(broker.config.as_strings().items()):
        if keys is not None and key not in keys:
            continue
        entries.append(
            Entry(
                name=key,
                value=value,
                read_only=True,
                is_default=False,
                config_source=STATIC_BROKER_CONFIG,
                is_sensitive=False,
                synonyms=[],
            )
        )
    return entries


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
                    broker, resource.resource_name, resource.configuration_keys, ctx.version
                )
            elif resource.resource_type == BROKER:
                if resource.resource_name not in ("", str(broker.broker_id)):
                    raise KafkaError(error_codes.INVALID_REQUEST, "Unknown broker id.")
                result.configs = _broker_entries(broker, resource.configuration_keys)
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


def _check_resource(broker: Broker, resource_type: int) -> None:
    if resource_type == BROKER:
        raise KafkaError(
            error_codes.INVALID_REQUEST, "Broker configs are static: set them in server.properties."
        )
    if resource_type != TOPIC:
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
    """Apply `new_config(resource)` to each topic resource; one answer per resource."""
    answers = []
    for r in resources:
        answer = answer_cls(resource_type=r.resource_type, resource_name=r.resource_name)
        try:
            _check_resource(broker, r.resource_type)
            _alter_topic(broker, r.resource_name, new_config(r), validate_only)
        except KafkaError as e:
            answer.error_code, answer.error_message = e.code, e.message
        answers.append(answer)
    return answers


def handle_alter_configs(broker: Broker, ctx: RequestContext) -> AlterConfigsResponse:
    """AlterConfigs replaces a topic's whole override set."""
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
    when the topic has no override)."""
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
        topic = broker.topics.get(r.resource_name)
        if topic is None:
            raise KafkaError(error_codes.UNKNOWN_TOPIC_OR_PARTITION)
        return _apply_operations(topic.config, broker.topic_defaults, r)

    answers = _alter_each(
        broker,
        request.resources,
        IncrementalAlterConfigsResponse.AlterConfigsResourceResponse,
        updated,
        request.validate_only,
    )
    return IncrementalAlterConfigsResponse(responses=answers)
