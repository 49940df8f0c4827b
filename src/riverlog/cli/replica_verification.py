"""`riverlog replica-verification`: Kafka's `kafka-replica-verification.sh`.

    riverlog replica-verification --broker-list HOST:PORT[,...] [--topic-white-list REGEX]
        [--fetch-size BYTES] [--max-wait-ms MS] [--time TIMESTAMP] [--report-interval-ms MS]
        [--time-ms MS]

Checks that all replicas of every partition of the matching topics hold the same data, and
reports how far behind the slowest partition's verification is: every `--report-interval-ms`
"<time>: max lag is N for partition t-p at offset O among R partitions". Batches with the
same offsets but different contents are reported as they are found ("partition t-p has
unmatched checksum at offset O; replica A's checksum X; replica B's checksum Y"); replicas
whose batches end at different offsets stop the tool at once with status 1, as Kafka's does
("partition t-p: replica A's offset O doesn't match replica B's offset P").

Verification starts at the offsets `--time` names (-1, the default: the latest, so only new
records are checked; -2: the earliest; else the first at or after that timestamp, in ms).
Kafka's tool runs until interrupted; `--time-ms` (riverlog's) stops it after that long, with
a last report, and status 1 if any divergence was seen, else 0.

How it works: one round fetches, from every broker at once, all the replicas it holds at the
partitions' current offsets — a Fetch with replica id -2, Kafka's debugging consumer, which
followers answer too, from their own logs up to their own high watermarks — then compares
them (`cli/replica_verifier.py`) and moves each partition's offset past what all replicas
agreed on. Connections are riverlog's client's (`client/cluster.py`): a broker that cannot be
reached answers nothing this round, and is tried again the next.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import defaultdict
from collections.abc import Mapping

from riverlog.cli import replica_verifier as rv
from riverlog.client import admin_requests as admin
from riverlog.client.cluster import Cluster
from riverlog.model import DEBUGGING_CONSUMER_ID, LATEST_TIMESTAMP, TopicPartition
from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.messages import FetchRequest, FetchResponse

FETCH_VERSION = 12  # topics by name; v13+ names them by id
CONNECT_TIMEOUT_MS = 10_000
INT32_MAX = 2**31 - 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--broker-list",
        required=True,
        metavar="HOST:PORT[,...]",
        help="the brokers to connect to for the cluster's metadata",
    )
    parser.add_argument(
        "--topic-white-list",
        "--topics-include",
        dest="topics",
        default=".*",
        metavar="REGEX",
        help="topics to verify (a regular expression; default: all)",
    )
    parser.add_argument(
        "--fetch-size",
        type=int,
        default=1024 * 1024,
        metavar="BYTES",
        help="bytes fetched per partition and round (default 1048576)",
    )
    parser.add_argument(
        "--max-wait-ms",
        type=int,
        default=1000,
        metavar="MS",
        help="longest wait of a fetch for new data (default 1000)",
    )
    parser.add_argument(
        "--time",
        type=int,
        default=-1,
        metavar="TIMESTAMP",
        help="where to start: -1 latest (default), -2 earliest, or a timestamp in ms",
    )
    parser.add_argument(
        "--report-interval-ms",
        type=int,
        default=30_000,
        metavar="MS",
        help="how often to report the max lag (default 30000)",
    )
    parser.add_argument(
        "--time-ms",
        type=int,
        default=None,
        metavar="MS",
        help="stop after this long (default: run until interrupted)",
    )


class Verification:
    """The tool's state: partitions, their replicas, and each partition's next offset."""

    def __init__(self, cluster: Cluster, args: argparse.Namespace) -> None:
        self.cluster = cluster
        self.fetch_size: int = args.fetch_size
        self.max_wait_ms: int = args.max_wait_ms
        self.report_interval_s: float = args.report_interval_ms / 1000
        self.replicas: dict[TopicPartition, list[int]] = {}
        self.offsets: dict[TopicPartition, int] = {}
        self.diverged = False
        self.last_lag: tuple[int, TopicPartition | None, int] = (-1, None, -1)

    async def discover(self, topics: str) -> bool:
        """The matching topics' partitions and replicas; False when none match."""
        pattern = rv.include_pattern(topics)
        await self.cluster.refresh()
        found = await admin.describe_topics(await self.cluster.any_connection())
        for topic in found:
            if pattern.fullmatch(topic.name):
                for p in topic.partitions:
                    self.replicas[(topic.name, p.partition)] = list(p.replicas)
        return bool(self.replicas)

    async def start_offsets(self, timestamp: int) -> None:
        """Where verification starts: ListOffsets on each partition's leader."""
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in self.replicas:
            by_leader[await self.cluster.leader_of(*tp)].append(tp)
        for leader, tps in by_leader.items():
            conn = await self.cluster.connection(leader)
            offsets = await admin.list_offsets(conn, tps, timestamp)
            missing = [tp for tp, offset in offsets.items() if offset < 0]
            if missing:  # no record that new: start at the end
                offsets.update(await admin.list_offsets(conn, missing, LATEST_TIMESTAMP))
            self.offsets.update(offsets)

    async def _fetch(
        self, broker: int, tps: list[TopicPartition]
    ) -> dict[TopicPartition, rv.ReplicaData]:
        """One Fetch of `tps` from `broker`; nothing (an empty answer) if it failed."""
        topics: dict[str, list[FetchRequest.FetchPartition]] = defaultdict(list)
        for topic, index in tps:
            topics[topic].append(
                FetchRequest.FetchPartition(
                    partition=index,
                    fetch_offset=self.offsets[(topic, index)],
                    current_leader_epoch=-1,
                    partition_max_bytes=self.fetch_size,
                )
            )
        request = FetchRequest(
            replica_id=DEBUGGING_CONSUMER_ID,
            max_wait_ms=self.max_wait_ms,
            min_bytes=1,
            max_bytes=min(INT32_MAX, self.fetch_size * len(tps)),
            session_id=0,
            session_epoch=-1,
            topics=[FetchRequest.FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()],
        )
        out = {tp: rv.ReplicaData() for tp in tps}
        try:
            conn = await self.cluster.connection(broker)
            version = min(conn.version_for(FetchRequest), FETCH_VERSION)
            response = await self.cluster.send(broker, request, version)
        except (ConnectionError, OSError, TimeoutError):
            await asyncio.sleep(self.max_wait_ms / 1000)  # as a fetch with no data would
            return out
        assert isinstance(response, FetchResponse)
        for t in response.responses:
            for p in t.partitions:
                tp = (t.topic, p.partition_index)
                if tp in out and p.error_code == 0:
                    records = p.records
                    batches = (
                        rv.batch_headers(records)
                        if isinstance(records, bytes | bytearray | memoryview)
                        else []
                    )
                    out[tp] = rv.ReplicaData(p.high_watermark, batches)
        return out

    async def round(self) -> dict[TopicPartition, dict[int, rv.ReplicaData]]:
        """Every replica of every partition, fetched once, from all brokers at once."""
        by_broker: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp, replicas in self.replicas.items():
            for broker in replicas:
                by_broker[broker].append(tp)
        brokers = sorted(by_broker)
        answers = await asyncio.gather(*(self._fetch(b, by_broker[b]) for b in brokers))
        fetched: dict[TopicPartition, dict[int, rv.ReplicaData]] = defaultdict(dict)
        for broker, answer in zip(brokers, answers, strict=True):
            for tp, data in answer.items():
                fetched[tp][broker] = data
        return fetched

    def verify(self, fetched: Mapping[TopicPartition, Mapping[int, rv.ReplicaData]]) -> bool:
        """Compare, print divergences, move offsets; False on replicas of different shapes."""
        max_lag: tuple[int, TopicPartition | None, int] = (-1, None, -1)
        for tp in sorted(fetched):
            result = rv.verify_partition(self.offsets[tp], fetched[tp])
            for m in result.checksum_mismatches:
                self.diverged = True
                print(rv.checksum_mismatch_line(tp, m, rv.now_text()), flush=True)
            if result.offset_mismatch is not None:
                self.diverged = True
                print(
                    rv.offset_mismatch_line(tp, result.offset_mismatch, rv.now_text()), flush=True
                )
                return False
            self.offsets[tp] = result.next_offset
            if result.lag > max_lag[0]:
                max_lag = (result.lag, tp, result.next_offset)
        self.last_lag = max_lag
        return True

    def report(self) -> None:
        lag, tp, offset = self.last_lag
        print(rv.lag_line(lag, tp, offset, len(self.replicas), rv.now_text()), flush=True)


async def _verify(args: argparse.Namespace) -> int:
    timeout_ms = args.max_wait_ms + 30_000
    cluster = Cluster(
        args.broker_list,
        "replica-verification",
        request_timeout_ms=timeout_ms,
        connection_setup_timeout_ms=CONNECT_TIMEOUT_MS,
    )
    deadline = None if args.time_ms is None else time.monotonic() + args.time_ms / 1000
    try:
        check = Verification(cluster, args)
        if not await check.discover(args.topics):
            print(
                f"No topics found. {args.topics}, if specified, is either filtering out all "
                "topics or there is no topic.",
                file=sys.stderr,
            )
            return 1
        await check.start_offsets(args.time)
        print(f"{rv.now_text()}: verification process is started.", flush=True)
        last_report = time.monotonic()
        while deadline is None or time.monotonic() < deadline:
            if not check.verify(await check.round()):
                return 1
            if time.monotonic() - last_report > check.report_interval_s:
                check.report()
                last_report = time.monotonic()
        check.report()
        return 1 if check.diverged else 0
    finally:
        await cluster.close()


def run(args: argparse.Namespace) -> int:
    if args.fetch_size <= 0 or args.max_wait_ms < 0 or args.report_interval_ms < 0:
        print(
            "--fetch-size must be positive, --max-wait-ms and --report-interval-ms not negative",
            file=sys.stderr,
        )
        return 1
    try:
        return asyncio.run(_verify(args))
    except KeyboardInterrupt:
        return 130
    except (KafkaError, ConnectionError, ValueError) as e:
        print(f"riverlog replica-verification: {e}", file=sys.stderr)
        return 1
