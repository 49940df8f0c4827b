"""`riverlog delete-records`: Kafka's `kafka-delete-records.sh`, same flags and output.

    riverlog delete-records --bootstrap-server HOST:PORT --offset-json-file FILE
                            [--command-config FILE]

The file: `{"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}`
(offset -1: up to the high watermark). Prints "Executing records delete operation", then
"Records delete operation completed:" and one line per partition —
"partition: foo-1\tlow_watermark: N" or "partition: foo-1\terror: <Kafka's exception text>" —
in the order Kafka's tool prints them (its HashMap's). A file naming a partition twice, an
unknown version or bad JSON is refused before anything is sent; status 1 on those.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from riverlog.cli.java_order import hash_map_order, topic_partition_hash
from riverlog.cli.tool_config import add_command_config, admin_config, command_properties
from riverlog.cli.tool_errors import exception_text
from riverlog.client.cluster import Cluster
from riverlog.protocol.error_codes import KafkaError, for_code
from riverlog.protocol.messages import DeleteRecordsRequest, DeleteRecordsResponse

TopicPartition = tuple[str, int]


class CommandError(ValueError):
    """An offset file or flags the tool refuses."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        required=True,
        metavar="server(s) to use for bootstrapping",
        help="REQUIRED: The server to connect to.",
    )
    parser.add_argument(
        "--offset-json-file",
        required=True,
        metavar="Offset json file path",
        help="REQUIRED: The JSON file with offset per partition. The format to "
        'use is: {"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], '
        '"version":1}',
    )
    add_command_config(parser)


def parse_offset_json(text: str) -> dict[TopicPartition, int]:
    """Kafka's offset file, refusing duplicate partitions as Kafka does."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise CommandError("The input string is not a valid JSON") from None
    if not isinstance(data, dict):
        raise CommandError("The input string is not a valid JSON")
    version = data.get("version", 1)
    if version != 1:
        raise CommandError(f"Not supported version field value {version}")
    if "partitions" not in data:
        raise CommandError("Missing partitions field")
    seen: dict[TopicPartition, list[int]] = {}
    for item in data["partitions"]:
        try:
            tp = (str(item["topic"]), int(item["partition"]))
            offset = int(item["offset"])
        except (KeyError, TypeError, ValueError) as e:
            raise CommandError(f"Invalid partition entry {json.dumps(item)}: {e}") from None
        seen.setdefault(tp, []).append(offset)
    duplicates = [f"{t}-{p}" for (t, p), offsets in seen.items() if len(offsets) > 1]
    if duplicates:
        raise CommandError(
            "Offset json file contains duplicate topic partitions: " + ",".join(duplicates)
        )
    return {tp: offsets[0] for tp, offsets in seen.items()}


async def delete(
    bootstrap: str, offsets: dict[TopicPartition, int], extra: dict[str, str]
) -> dict[TopicPartition, int | KafkaError]:
    """DeleteRecords at each partition's leader: its new low watermark or its error."""
    cluster = Cluster.from_config(admin_config(bootstrap, "adminclient-1", extra))
    out: dict[TopicPartition, int | KafkaError] = {}
    try:
        await cluster.refresh(sorted({t for t, _ in offsets}), allow_auto_create=False)
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in offsets:
            leader = cluster.leaders.get(tp, -1)
            if tp[0] not in cluster.partition_counts:
                out[tp] = KafkaError(for_code(3))
            elif leader < 0:
                out[tp] = KafkaError(for_code(5))
            else:
                by_leader.setdefault(leader, []).append(tp)
        for leader, tps in by_leader.items():
            out.update(await _delete_at(cluster, leader, tps, offsets))
    finally:
        await cluster.close()
    return out


async def _delete_at(
    cluster: Cluster, leader: int, tps: list[TopicPartition], offsets: dict[TopicPartition, int]
) -> dict[TopicPartition, int | KafkaError]:
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    request = DeleteRecordsRequest(
        timeout_ms=30_000,
        topics=[
            DeleteRecordsRequest.DeleteRecordsTopic(
                name=t,
                partitions=[
                    DeleteRecordsRequest.DeleteRecordsPartition(
                        partition_index=p, offset=offsets[(t, p)]
                    )
                    for p in ps
                ],
            )
            for t, ps in by_topic.items()
        ],
    )
    response = await cluster.send(leader, request)
    assert isinstance(response, DeleteRecordsResponse)
    out: dict[TopicPartition, int | KafkaError] = {}
    for answer in response.topics:
        for part in answer.partitions:
            key = (answer.name, part.partition_index)
            code = part.error_code
            out[key] = KafkaError(for_code(code)) if code else part.low_watermark
    return out


def format_results(results: dict[TopicPartition, int | KafkaError]) -> list[str]:
    lines = []
    for tp in hash_map_order(results, lambda tp: topic_partition_hash(*tp)):
        value = results[tp]
        if isinstance(value, KafkaError):
            lines.append(f"partition: {tp[0]}-{tp[1]}\terror: {exception_text(value)}")
        else:
            lines.append(f"partition: {tp[0]}-{tp[1]}\tlow_watermark: {value}")
    return lines


def run(args: argparse.Namespace) -> int:
    try:
        offsets = parse_offset_json(Path(args.offset_json_file).read_text(encoding="utf-8"))
        extra = command_properties(args)
        print("Executing records delete operation", flush=True)
        results = asyncio.run(delete(args.bootstrap_server, offsets, extra))
    except (KafkaError, ValueError, OSError) as e:
        print(e, file=sys.stderr)
        return 1
    print("Records delete operation completed:")
    for line in format_results(results):
        print(line)
    return 0
