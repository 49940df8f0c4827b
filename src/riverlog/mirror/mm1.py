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

Exactly-once (`--exactly.once.source.support enabled`, riverlog's flag, named after the
MirrorMaker 2 worker setting; Kafka's MM1 has none): each stream is an
`exactly_once.ExactlyOnceStream`; transactional ids `<prefix>-<topic>-<partition>`, the prefix
being the producer config's `transactional.id` if set, else `group.id`; source offsets in the
compacted topic `mm1-offsets.<group.id>.internal` on the target (25 partitions, replication
factor up to 3), keys `["mirror-maker",{"group":...,"partition":...,"topic":...}]`. It needs
`--abort.on.send.failure true` (a record cannot be skipped inside a transaction).
`--metrics.listener http://HOST:PORT` serves the mirror's metrics (`metrics.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from riverlog.client.producer import AsyncProducer
from riverlog.metrics_http import parse_listener
from riverlog.mirror.exactly_once import ExactlyOnceStream, OffsetStore, ensure_offsets_topic
from riverlog.mirror.flow import MirrorStream
from riverlog.mirror.metrics import MetricsEndpoint, MirrorMetrics
from riverlog.mirror.policy import include_pattern
from riverlog.mirror.records import source_offset_key

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
    exactly_once: bool = False
    metrics_listener: str = ""
    offsets_partitions = 25
    offsets_replication_factor = 3

    def check(self) -> None:
        """ValueError for options that cannot work together."""
        if self.num_streams < 1:
            raise ValueError("--num.streams must be at least 1")
        if self.exactly_once and not self.abort_on_send_failure:
            raise ValueError(
                "--exactly.once.source.support enabled needs --abort.on.send.failure true"
            )
        parse_listener(self.metrics_listener)


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


def offsets_topic(group: str) -> str:
    return f"mm1-offsets.{group}.internal"


def _key_of(group: str) -> Callable[[str, int], bytes]:
    def key(topic: str, partition: int) -> bytes:
        return source_offset_key(
            "mirror-maker", {"group": group, "topic": topic, "partition": partition}
        )

    return key


async def run(options: MirrorMakerOptions, stop: asyncio.Event) -> None:
    """Mirror until `stop` is set; raises SendFailed (after stopping every stream) when a
    send failed for good with `abort_on_send_failure`."""
    address = parse_listener(options.metrics_listener)
    metrics = MirrorMetrics() if address is not None else None
    async with contextlib.AsyncExitStack() as stack:
        if address is not None and metrics is not None:
            await stack.enter_async_context(MetricsEndpoint(metrics, *address))
        await _run(options, stop, metrics)


async def _run(
    options: MirrorMakerOptions, stop: asyncio.Event, metrics: MirrorMetrics | None
) -> None:
    pattern = include_pattern(options.include).pattern
    pattern = f"(?!__)(?:{pattern})"  # internal topics are never mirrored, as in MM1
    configs = [consumer_config(options, i) for i in range(options.num_streams)]
    group = configs[0]["group.id"]
    target_config = producer_config(options)
    flow_metrics = metrics.flow("source", "target") if metrics is not None else None
    store = None
    if options.exactly_once:
        topic = offsets_topic(group)
        partitions = await ensure_offsets_topic(
            target_config, topic, options.offsets_partitions, options.offsets_replication_factor
        )
        store = OffsetStore(target_config, topic, partitions, _key_of(group))
    shared = {k: v for k, v in target_config.items() if k != "transactional.id"}
    async with AsyncProducer(shared) as producer:
        streams: list[MirrorStream] = []
        for config in configs:
            if store is not None:
                streams.append(
                    ExactlyOnceStream(
                        config,
                        producer,
                        target_config,
                        store,
                        target_config.get("transactional.id") or group,
                        commit_interval_ms=options.offset_commit_interval_ms,
                        metrics=flow_metrics,
                    )
                )
            else:
                streams.append(
                    MirrorStream(
                        config,
                        producer,
                        commit_interval_ms=options.offset_commit_interval_ms,
                        abort_on_send_failure=options.abort_on_send_failure,
                        metrics=flow_metrics,
                    )
                )
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
