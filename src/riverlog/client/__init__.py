"""riverlog's own Kafka client: asyncio first (`AsyncProducer`, `AsyncConsumer`, `AsyncAdmin`),
with a blocking facade of the same shape (`Producer`, `Consumer`, `Admin`). Configuration
takes Kafka's keys (`bootstrap.servers`, `linger.ms`, `group.id`, ...).

Imports here are lazy, so the broker (which uses only `client.connection`) does not load the
client's dependencies (pyarrow, uvloop).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from riverlog.client.admin import AsyncAdmin as AsyncAdmin
    from riverlog.client.consumer import AsyncConsumer as AsyncConsumer
    from riverlog.client.consumer import ConsumerRecord as ConsumerRecord
    from riverlog.client.producer import AsyncProducer as AsyncProducer
    from riverlog.client.producer import RecordMetadata as RecordMetadata
    from riverlog.client.sync import Admin as Admin
    from riverlog.client.sync import Consumer as Consumer
    from riverlog.client.sync import Producer as Producer
    from riverlog.client.transactional_producer import (
        AsyncTransactionalProducer as AsyncTransactionalProducer,
    )

_WHERE = {
    "AsyncAdmin": "riverlog.client.admin",
    "AsyncConsumer": "riverlog.client.consumer",
    "ConsumerRecord": "riverlog.client.consumer",
    "AsyncProducer": "riverlog.client.producer",
    "RecordMetadata": "riverlog.client.producer",
    "AsyncTransactionalProducer": "riverlog.client.transactional_producer",
    "Admin": "riverlog.client.sync",
    "Consumer": "riverlog.client.sync",
    "Producer": "riverlog.client.sync",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'riverlog.client' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_WHERE[name]), name)
