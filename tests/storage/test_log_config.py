"""A topic's log config: Kafka's names parsed into `LogConfig`, and the values refused."""

from __future__ import annotations

import pytest

from riverlog.storage.log_config import TOPIC_CONFIG_NAMES, InvalidConfigError, LogConfig


def test_log_config_parses_kafka_names() -> None:
    cfg = LogConfig.from_map(
        {
            "segment.bytes": "20000",
            "index.interval.bytes": "500",
            "cleanup.policy": "compact,delete",
            "retention.ms": "-1",
            "message.timestamp.type": "LogAppendTime",
            "preallocate": "TRUE",
        }
    )
    assert cfg.segment_bytes == 20000 and cfg.index_interval_bytes == 500
    assert cfg.compact and cfg.delete and cfg.log_append_time and cfg.preallocate
    assert LogConfig.from_map({}) == LogConfig()
    assert set(LogConfig().to_map()) == TOPIC_CONFIG_NAMES
    assert LogConfig.from_map(LogConfig().to_map()) == LogConfig()


@pytest.mark.parametrize(
    "name,value",
    [
        ("segment.byte", "1"),
        ("log.segment.bytes", "1000"),
        ("segment.bytes", "abc"),
        ("segment.bytes", "13"),
        ("segment.bytes", "1.5"),
        ("retention.ms", "-2"),
        ("cleanup.policy", "remove"),
        ("cleanup.policy", ""),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("min.cleanable.dirty.ratio", "x"),
        ("message.timestamp.type", "createtime"),
        ("preallocate", "yes"),
        ("compression.type", "brotli"),
        ("flush.messages", "0"),
        ("min.insync.replicas", "0"),
    ],
)
def test_log_config_rejects(name: str, value: str) -> None:
    with pytest.raises(InvalidConfigError):
        LogConfig.from_map({name: value})
