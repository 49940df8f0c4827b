"""`riverlog mirror-maker` (kafka-mirror-maker.sh, MirrorMaker 1) and `riverlog
connect-mirror-maker` (connect-mirror-maker.sh, MirrorMaker 2): flags, files and exit codes.

    riverlog mirror-maker --consumer.config source.properties --producer.config target.properties \\
        --include 'events.*' [--num.streams N] [--offset.commit.interval.ms MS] \\
        [--abort.on.send.failure true|false] [--exactly.once.source.support enabled|disabled] \\
        [--metrics.listener http://HOST:PORT]
    riverlog connect-mirror-maker mm2.properties [--clusters b ...]

Both run until SIGTERM or SIGINT, then flush and commit what the targets acknowledged and
exit 0. A record that cannot be delivered stops them with status 1 (MM1 only with
`--abort.on.send.failure true`, its default); a bad flag or file, status 2. By default both
mirror at-least-once (a killed mirror resends what followed its last commit); with
exactly-once (`--exactly.once.source.support enabled`; MM2: `exactly.once.source.support`)
records and source offsets commit in one transaction on the target.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from riverlog.client.config import AdminConfig, ConsumerConfig, ProducerConfig
from riverlog.mirror import mm1, mm2, mm2_config
from riverlog.mirror.flow import SendFailed
from riverlog.properties import parse_properties
from riverlog.protocol.error_codes import KafkaError
from riverlog.server.config import ConfigError


def add_mm1_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--consumer.config",
        dest="consumer_config",
        required=True,
        metavar="FILE",
        help="source consumer config (needs group.id)",
    )
    parser.add_argument(
        "--producer.config",
        dest="producer_config",
        required=True,
        metavar="FILE",
        help="target producer config",
    )
    topics = parser.add_mutually_exclusive_group(required=True)
    topics.add_argument("--include", metavar="REGEX", help="topics to mirror (a Java regex)")
    topics.add_argument(
        "--whitelist", dest="include", metavar="REGEX", help="DEPRECATED: use --include"
    )
    parser.add_argument(
        "--num.streams",
        dest="num_streams",
        type=int,
        default=1,
        metavar="N",
        help="consumers (default 1)",
    )
    parser.add_argument(
        "--offset.commit.interval.ms",
        dest="offset_commit_interval_ms",
        type=int,
        default=60000,
        metavar="MS",
        help="default 60000",
    )
    parser.add_argument(
        "--abort.on.send.failure",
        dest="abort_on_send_failure",
        default="true",
        choices=["true", "false"],
        help="stop when a send fails (default true)",
    )
    parser.add_argument(
        "--exactly.once.source.support",
        dest="exactly_once",
        default="disabled",
        choices=["enabled", "disabled"],
        help="records and source offsets in one transaction on the target (default disabled)",
    )
    parser.add_argument(
        "--metrics.listener",
        dest="metrics_listener",
        default="",
        metavar="http://HOST:PORT",
        help="serve Prometheus metrics at /metrics (default: none)",
    )


def add_mm2_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", metavar="mm2.properties", help="MirrorMaker 2 config file")
    parser.add_argument(
        "--clusters",
        nargs="+",
        metavar="ALIAS",
        help="run only the flows whose target is one of these",
    )


def _load(path: str) -> dict[str, str]:
    return parse_properties(Path(path).read_text())


def _serve(name: str, body: Callable[[asyncio.Event], Awaitable[None]]) -> int:
    logging.basicConfig(
        level=logging.INFO, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s"
    )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await body(stop)

    try:
        asyncio.run(main())
    except SendFailed as e:
        print(f"riverlog {name}: {e}; exiting without committing", file=sys.stderr)
        return 1
    except (KafkaError, ConnectionError, OSError) as e:
        print(f"riverlog {name}: {e}", file=sys.stderr)
        return 1
    return 0


def run_mm1(args: argparse.Namespace) -> int:
    try:
        options = mm1.MirrorMakerOptions(
            consumer=_load(args.consumer_config),
            producer=_load(args.producer_config),
            include=args.include,
            num_streams=args.num_streams,
            offset_commit_interval_ms=args.offset_commit_interval_ms,
            abort_on_send_failure=args.abort_on_send_failure == "true",
            exactly_once=args.exactly_once == "enabled",
            metrics_listener=args.metrics_listener,
        )
        options.check()
        ConsumerConfig.parse(mm1.consumer_config(options, 0))
        ProducerConfig.parse(mm1.producer_config(options))
    except (ConfigError, OSError, ValueError) as e:
        print(f"riverlog mirror-maker: {e}", file=sys.stderr)
        return 2
    return _serve("mirror-maker", lambda stop: mm1.run(options, stop))


def run_mm2(args: argparse.Namespace) -> int:
    try:
        props = _load(args.config)
        flows = mm2_config.parse(props)
        listener = mm2_config.metrics_listener(props)
        if args.clusters:
            flows = [f for f in flows if f.target.alias in args.clusters]
            if not flows:
                raise ValueError(f"no enabled flow targets {', '.join(args.clusters)}")
        for flow in flows:  # client settings fail here, before anything connects
            for clients in (flow.source, flow.target):
                ConsumerConfig.parse(clients.consumer_config())
                ProducerConfig.parse(clients.producer_config())
                AdminConfig.parse(clients.admin_config())
    except (ConfigError, OSError, ValueError) as e:
        print(f"riverlog connect-mirror-maker: {e}", file=sys.stderr)
        return 2
    return _serve("connect-mirror-maker", lambda stop: mm2.run(flows, stop, listener))
