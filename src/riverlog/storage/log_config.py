"""Per-topic log configuration: Kafka's topic-level config names, defaults and validation.

A `LogConfig` is built from the merged string map (broker defaults from `log.*` keys, then the
topic's overrides) that `kafka-configs` and CreateTopics speak. Unknown keys are rejected the
way Kafka rejects them (`Unknown topic config name`); values are parsed and range-checked here,
once, so the log never sees a bad value.

Invariants: every field holds a parsed, in-range value; `LogConfig.from_map({})` is Kafka's
default topic configuration.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from functools import cached_property

LONG_MAX = 2**63 - 1


class InvalidConfigError(ValueError):
    """A topic config name or value Kafka would reject (INVALID_CONFIG)."""


def _int(low: int | None = None, high: int | None = None) -> Callable[[str, str], int]:
    def parse(name: str, text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise InvalidConfigError(
                f"Invalid value {text} for configuration {name}: Not a number of type LONG"
            ) from None
        if (low is not None and value < low) or (high is not None and value > high):
            bound = f"at least {low}" if high is None else f"in [{low},...,{high}]"
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {name}: Value must be {bound}"
            )
        return value

    return parse


def _float(low: float, high: float) -> Callable[[str, str], float]:
    def parse(name: str, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise InvalidConfigError(f"Invalid value {text} for configuration {name}") from None
        if not low <= value <= high:
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {name}: Value must be in [{low},{high}]"
            )
        return value

    return parse


def _bool(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise InvalidConfigError(
            f"Invalid value {text} for configuration {name}: Expected value to be either "
            "true or false"
        )
    return lowered == "true"


def _choice(*allowed: str) -> Callable[[str, str], str]:
    def parse(name: str, text: str) -> str:
        if text not in allowed:
            raise InvalidConfigError(
                f"Invalid value {text} for configuration {name}: String must be one of: "
                + ", ".join(allowed)
            )
        return text

    return parse


def _policy(name: str, text: str) -> frozenset[str]:
    parts = frozenset(p.strip() for p in text.split(",") if p.strip())
    if not parts or not parts <= {"delete", "compact"}:
        raise InvalidConfigError(
            f"Invalid value {text} for configuration {name}: String must be one of: compact, delete"
        )
    return parts


def _text(name: str, text: str) -> str:
    return text


@dataclass(frozen=True)
class LogConfig:
    """One partition log's configuration (Kafka's topic-level names, with dots as _)."""

    segment_bytes: int = 1024**3
    segment_ms: int = 7 * 24 * 3_600_000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3_600_000
    retention_bytes: int = -1
    cleanup_policy: frozenset[str] = frozenset({"delete"})
    delete_retention_ms: int = 86_400_000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60_000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1_048_588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    message_timestamp_difference_max_ms: int = LONG_MAX
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    compression_type: str = "producer"
    preallocate: bool = False
    message_downconversion_enable: bool = True
    message_format_version: str = "3.0-IV1"
    follower_replication_throttled_replicas: str = ""
    leader_replication_throttled_replicas: str = ""

    # Cached (the config is frozen): read for every produced batch, where a property is a
    # call each time.
    @cached_property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @cached_property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def from_map(cls, config: Mapping[str, str]) -> LogConfig:
        """Parse a topic config map (Kafka names); raises `InvalidConfigError`."""
        values: dict[str, object] = {}
        for name, text in config.items():
            parser = _PARSERS.get(name)
            if parser is None:
                raise InvalidConfigError(f"Unknown topic config name: {name}")
            values[name.replace(".", "_")] = parser(name, str(text))
        return cls(**values)  # type: ignore[arg-type]

    def to_map(self) -> dict[str, str]:
        """Every setting as Kafka names and strings (DescribeConfigs)."""
        out: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, frozenset):
                text = ",".join(sorted(value))
            elif isinstance(value, bool):
                text = str(value).lower()
            else:
                text = str(value)
            out[f.name.replace("_", ".")] = text
        return out


_PARSERS: dict[str, Callable[[str, str], object]] = {
    "segment.bytes": _int(14),
    "segment.ms": _int(1),
    "segment.jitter.ms": _int(0),
    "segment.index.bytes": _int(4),
    "index.interval.bytes": _int(0),
    "retention.ms": _int(-1),
    "retention.bytes": _int(-1),
    "cleanup.policy": _policy,
    "delete.retention.ms": _int(0),
    "min.cleanable.dirty.ratio": _float(0.0, 1.0),
    "min.compaction.lag.ms": _int(0),
    "max.compaction.lag.ms": _int(1),
    "file.delete.delay.ms": _int(0),
    "flush.messages": _int(1),
    "flush.ms": _int(0),
    "max.message.bytes": _int(0),
    "message.timestamp.type": _choice("CreateTime", "LogAppendTime"),
    "message.timestamp.before.max.ms": _int(0),
    "message.timestamp.after.max.ms": _int(0),
    "message.timestamp.difference.max.ms": _int(0),
    "min.insync.replicas": _int(1),
    "unclean.leader.election.enable": _bool,
    "compression.type": _choice("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    "preallocate": _bool,
    "message.downconversion.enable": _bool,
    "message.format.version": _text,
    "follower.replication.throttled.replicas": _text,
    "leader.replication.throttled.replicas": _text,
}

TOPIC_CONFIG_NAMES = frozenset(_PARSERS)
