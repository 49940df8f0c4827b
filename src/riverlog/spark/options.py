"""The Spark connector's options, parsed and checked: the names of Spark's Kafka connector.

Owns `SourceOptions.parse` / `SinkOptions.parse` (pure: no pyspark, no sockets) and the offset
JSON of Spark's Kafka source (`{"topic": {"0": 23, "1": -2}}`, -2 earliest, -1 latest), which
is also what the streaming source stores in Spark's checkpoint.

Spark hands a data source its options with lower-cased keys, so the names are matched
lower-cased here (`startingoffsets` for `startingOffsets`). Invariants: a bad or conflicting
option is a `ValueError` naming it, raised on the driver before any task runs; `kafka.X`
options reach the client as `X`, except those Spark's connector also refuses (the connector
manages offsets and serialization itself).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from riverlog.model import TopicPartition

EARLIEST = -2
LATEST = -1

Subscription = (
    tuple[Literal["subscribe"], list[str]]
    | tuple[Literal["subscribePattern"], re.Pattern[str]]
    | tuple[Literal["assign"], list[TopicPartition]]
)


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends, for every partition or per partition.

    `kind`: "earliest", "latest", "offsets" (`per_partition` offsets, -2/-1 allowed),
    "timestamp" (`timestamp` ms for every partition) or "timestamps" (`per_partition`
    timestamps)."""

    kind: Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]
    per_partition: dict[TopicPartition, int] = field(default_factory=dict)
    timestamp: int = 0


@dataclass(frozen=True)
class SourceOptions:
    client: dict[str, str]
    """Client config: `bootstrap.servers` and the `kafka.*` pass-through, prefix removed."""
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    timestamp_strategy: Literal["error", "latest"] = "error"


@dataclass(frozen=True)
class SinkOptions:
    client: dict[str, str]
    topic: str | None = None
    """The `topic` option: every row goes there (it overrides a `topic` column)."""
    exactly_once: bool = False
    """`deliveryGuarantee`: `exactly-once` (streaming only) or `at-least-once` (default)."""
    transactional_id_prefix: str = "riverlog-spark-"
    """`transactionalIdPrefix`: a task's transactional id is prefix + queryId-partitionId."""


# Keys Spark's Kafka connector refuses after `kafka.`, and why (its own wording, shortened).
_REFUSED = {
    "group.id": "the connector reads without a consumer group",
    "auto.offset.reset": "use startingOffsets instead",
    "key.deserializer": "keys are always read as bytes",
    "value.deserializer": "values are always read as bytes",
    "key.serializer": "keys are always written as bytes",
    "value.serializer": "values are always written as bytes",
    "enable.auto.commit": "offsets live in Spark's checkpoint, not in Kafka",
    "interceptor.classes": "not supported",
}
_SUBSCRIPTIONS = ("subscribe", "subscribepattern", "assign")


def client_config(options: Mapping[str, str]) -> dict[str, str]:
    """`bootstrap.servers` plus every `kafka.*` option, prefix removed."""
    config = {k[len("kafka.") :]: v for k, v in options.items() if k.startswith("kafka.")}
    for key, why in _REFUSED.items():
        if key in config:
            raise ValueError(f"Kafka option 'kafka.{key}' is not supported: {why}")
    plain = options.get("bootstrap.servers")
    if plain and "bootstrap.servers" not in config:
        config["bootstrap.servers"] = plain
    if not config.get("bootstrap.servers"):
        raise ValueError("option 'kafka.bootstrap.servers' is required")
    return config


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): str(v) for k, v in options.items()}


def _int_option(options: Mapping[str, str], name: str, low: int) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"option '{name}' must be an integer, not {raw!r}") from None
    if value < low:
        raise ValueError(f"option '{name}' must be at least {low}, not {value}")
    return value


def _bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise ValueError(f"option '{name}' must be true or false, not {raw!r}")
    return raw.strip().lower() == "true"


def parse_partition_json(name: str, raw: str) -> dict[TopicPartition, int]:
    """`{"t": {"0": 23, "1": -2}}` → {("t", 0): 23, ("t", 1): -2}."""
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise TypeError
        return {
            (topic, int(p)): int(v)
            for topic, partitions in data.items()
            for p, v in partitions.items()
        }
    except (ValueError, TypeError, AttributeError):
        raise ValueError(
            f'option \'{name}\' must be JSON like {{"topicA":{{"0":23,"1":-1}}}}, not {raw!r}'
        ) from None


def offsets_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Per-partition offsets in the checkpoint's form (topics and partitions sorted)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def offsets_from_json(data: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    return {(t, int(p)): int(o) for t, ps in data.items() for p, o in ps.items()}


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = [k for k in _SUBSCRIPTIONS if k in options]
    if len(given) != 1:
        raise ValueError(
            "exactly one of the options 'subscribe', 'subscribePattern' or 'assign' is "
            f"required (got {len(given)})"
        )
    raw = options[given[0]]
    if given[0] == "subscribe":
        topics = [t.strip() for t in raw.split(",") if t.strip()]
        if not topics:
            raise ValueError("option 'subscribe' names no topic")
        return ("subscribe", topics)
    if given[0] == "subscribepattern":
        try:
            return ("subscribePattern", re.compile(raw))
        except re.error as e:
            raise ValueError(f"option 'subscribePattern' is not a regex: {e}") from None
    try:
        data = json.loads(raw)
        tps = [(t, int(p)) for t, ps in data.items() for p in ps]
    except (ValueError, TypeError, AttributeError):
        raise ValueError(
            f"option 'assign' must be JSON like {{\"topicA\":[0,1]}}, not {raw!r}"
        ) from None
    if not tps:
        raise ValueError("option 'assign' names no partition")
    return ("assign", sorted(tps))


def _offset_spec(
    options: Mapping[str, str], prefix: str, default: Literal["earliest", "latest"]
) -> OffsetSpec:
    """startingTimestamp > startingOffsetsByTimestamp > startingOffsets, as Spark decides."""
    timestamp = _int_option(options, f"{prefix}Timestamp", 0)
    if timestamp is not None:
        return OffsetSpec("timestamp", timestamp=timestamp)
    by_timestamp = options.get(f"{prefix}offsetsbytimestamp")
    if by_timestamp is not None:
        name = f"{prefix}OffsetsByTimestamp"
        return OffsetSpec("timestamps", parse_partition_json(name, by_timestamp))
    raw = options.get(f"{prefix}offsets")
    if raw is None:
        return OffsetSpec(default)
    if raw.strip().lower() in ("earliest", "latest"):
        return OffsetSpec("earliest" if raw.strip().lower() == "earliest" else "latest")
    return OffsetSpec("offsets", parse_partition_json(f"{prefix}Offsets", raw))


def _check_fixed(spec: OffsetSpec, subscription: Subscription, name: str) -> None:
    """Per-partition specs must cover exactly the assigned partitions (Spark's rule)."""
    if spec.kind not in ("offsets", "timestamps") or subscription[0] != "assign":
        return
    if set(spec.per_partition) != set(subscription[1]):
        raise ValueError(f"option '{name}' must name exactly the partitions in 'assign'")


def parse_source(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """The source's options; `streaming` selects the defaults and what is allowed."""
    lowered = _lower(options)
    subscription = _subscription(lowered)
    starting = _offset_spec(lowered, "starting", "latest" if streaming else "earliest")
    ending = _offset_spec(lowered, "ending", "latest")
    _check_fixed(starting, subscription, "startingOffsets")
    if streaming:
        if any(k.startswith("ending") for k in lowered):
            raise ValueError("ending offsets are for batch queries, not streaming ones")
    else:
        if starting.kind == "latest":
            raise ValueError("option 'startingOffsets' can't be latest for batch queries")
        if any(v == LATEST for v in starting.per_partition.values()) and starting.kind == "offsets":
            raise ValueError("option 'startingOffsets' can't hold -1 (latest) for batch queries")
        if ending.kind == "earliest" or (
            ending.kind == "offsets" and any(v == EARLIEST for v in ending.per_partition.values())
        ):
            raise ValueError("option 'endingOffsets' can't be earliest for batch queries")
        _check_fixed(ending, subscription, "endingOffsets")
        if "maxoffsetspertrigger" in lowered:
            raise ValueError("option 'maxOffsetsPerTrigger' is for streaming queries")
    strategy = lowered.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise ValueError("option 'startingOffsetsByTimestampStrategy' must be error or latest")
    return SourceOptions(
        client=client_config(lowered),
        subscription=subscription,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=_int_option(lowered, "maxOffsetsPerTrigger", 1),
        min_partitions=_int_option(lowered, "minPartitions", 1),
        fail_on_data_loss=_bool_option(lowered, "failOnDataLoss", True),
        include_headers=_bool_option(lowered, "includeHeaders", False),
        poll_timeout_ms=_int_option(lowered, "kafkaConsumer.pollTimeoutMs", 1) or 120_000,
        timestamp_strategy="latest" if strategy == "latest" else "error",
    )


def parse_sink(options: Mapping[str, str], *, streaming: bool = True) -> SinkOptions:
    lowered = _lower(options)
    topic = lowered.get("topic")
    if topic is not None and not topic.strip():
        raise ValueError("option 'topic' is empty")
    guarantee = lowered.get("deliveryguarantee", "at-least-once").strip().lower()
    if guarantee not in ("at-least-once", "exactly-once"):
        raise ValueError("option 'deliveryGuarantee' must be at-least-once or exactly-once")
    if guarantee == "exactly-once" and not streaming:
        raise ValueError(
            "option 'deliveryGuarantee' exactly-once is for streaming queries (writeStream); "
            "a batch write is at-least-once"
        )
    prefix = lowered.get("transactionalidprefix", "riverlog-spark-")
    if not prefix.strip():
        raise ValueError("option 'transactionalIdPrefix' is empty")
    client = client_config(lowered)
    if "transactional.id" in client:
        raise ValueError(
            "Kafka option 'kafka.transactional.id' is not supported: with "
            "deliveryGuarantee=exactly-once each task derives its own from transactionalIdPrefix"
        )
    return SinkOptions(
        client=client,
        topic=topic,
        exactly_once=guarantee == "exactly-once",
        transactional_id_prefix=prefix,
    )
