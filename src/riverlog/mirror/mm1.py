"""`riverlog mirror-maker`: Kafka's MirrorMaker 1 (`kafka-mirror-maker.sh`) on riverlog's client.

`--num.streams` consumers of one group (`group.id` of `--consumer.config`) share one producer
(`--producer.config`), as in MM1. Defaults are MM1's "no data loss" ones unless the files set
them: consumer `enable.auto.commit=false`; producer `acks=all`, `delivery.timeout.ms` and
`max.block.ms` as large as they go. MM1 also defaults `max.in.flight.requests.per.connection`
to 1 to keep order; riverlog's producer is idempotent by default, which keeps each partition's
order with up to 5 requests in flight, so that default is not needed. The serializer and
deserializer keys of Kafka's files are accepted only as the byte-array classes MM1 forces.

Target topics are not created here (MM1 relies on the target's `auto.create.topics.enable`);
MirrorMaker 2 (`mm2.py`) creates them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from riverlog.client.producer import AsyncProducer
from riverlog.mirror.flow import MirrorStream
from riverlog.mirror.policy import include_pattern

log = logging.getLogger("riverlog.mirror")
INT_MAX = 2_147_483_647
BYTE_ARRAY_CLASSES = {
    "key.serializer": "org.apache.kafka.common.serialization.ByteArraySerializer",
    "value.serializer": "org.apache.kafka.common.serialization.ByteArraySerializer",
    "key.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer",
    "value.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer",
}


@dataclass(frozen=True)
class MirrorMakerOptions:
    consumer: dict[str, str]
    producer: dict[str, str]
    include: str
    num_streams: int = 1
    offset_commit_interval_ms: int = 60_000
    abort_on_send_failure: bool = True


def _client_config(props: Mapping[str, str], what: str) -> dict[str, str]:
    out = {}
    for key, value in props.items():
        if key in BYTE_ARRAY_CLASSES:
            if value.strip() != BYTE_ARRAY_CLASSES[key]:
                raise ValueError(f"{what}: {key} must be {BYTE_ARRAY_CLASSES[key]} (MM1's)")
            continue
        out[key] = value
    return out


def consumer_config(options: MirrorMakerOptions, stream: int) -> dict[str, str]:
    config = {"enable.auto.commit": "false", **_client_config(options.consumer, "consumer")}
    if not config.get("group.id"):
        raise ValueError("--consumer.config must set group.id (the mirror's consumer group)")
    if config["enable.auto.commit"].strip().lower() == "true":
        log.warning(
            "enable.auto.commit=true: offsets may be committed before records are "
            "mirrored, so a crash can lose them"
        )
    config["client.id"] = f"{config['group.id']}-{stream}"
    return config


def producer_config(options: MirrorMakerOptions) -> dict[str, str]:
    defaults = {"acks": "all", "delivery.timeout.ms": str(INT_MAX), "max.block.ms": str(INT_MAX)}
    config = {**defaults, **_client_config(options.producer, "producer")}
    for key, value in defaults.items():
        if config[key] != value:
            log.info(
                "Property %s is overridden to %s - data loss or message reordering is possible.",
                key,
                config[key],
            )
    return config


async def run(options: MirrorMakerOptions, stop: asyncio.Event) -> None:
    """Mirror until `stop` is set; raises SendFailed (after stopping every stream) when a
    send failed for good with `abort_on_send_failure`."""
    pattern = include_pattern(options.include).pattern
    pattern = f"(?!__)(?:{pattern})"  # internal topics are never mirrored, as in MM1
    configs = [consumer_config(options, i) for i in range(options.num_streams)]
    async with AsyncProducer(producer_config(options)) as producer:
        streams = [
            MirrorStream(
                config,
                producer,
                commit_interval_ms=options.offset_commit_interval_ms,
                abort_on_send_failure=options.abort_on_send_failure,
            )
            for config in configs
        ]
        for stream in streams:
            stream.subscribe(pattern=pattern)
        tasks = [asyncio.create_task(s.run(stop)) for s in streams]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            failed = [t for t in done if t.exception() is not None]
            if failed:
                stop.set()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise failed[0].exception()  # type: ignore[misc]
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
