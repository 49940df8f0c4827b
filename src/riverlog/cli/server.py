"""`riverlog server`: run one broker in the foreground until SIGINT/SIGTERM.

    riverlog server [server.properties] [--listen HOST:PORT] [--data-dir DIR]
                    [--zookeeper HOST:PORT[/CHROOT]] [--broker-id N] [--override key=value ...]
                    [--log-config log4j.properties]

Without `zookeeper.connect` (`--zookeeper`) it is a single-node cluster keeping its metadata
in the data directory; with it, it joins the cluster registered there as `broker.id`. It
prints `riverlog broker <id> listening on HOST:PORT` once it serves (tools and tests wait for
that line; with port 0 it names the port chosen). SIGTERM and SIGINT shut down
cleanly: stop accepting, drain, flush, checkpoint, clean-shutdown marker. The broker's
state-change log is `state-change.log` in its (first) log directory, rolled every hour to
`state-change.log.YYYY-MM-DD-HH` (a week of rolled files kept). `--log-config` takes a
log4j.properties-style file (`server/log4j_config.py`; `${kafka.logs.dir}` is the first log
directory) in place of the default console logging at INFO; when it configures
`state.change.logger` itself, the default state-change log is not set up.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import logging.handlers
import re
import signal
import sys
from pathlib import Path

from riverlog.server import log4j_config, state_change_log
from riverlog.server.broker import Broker
from riverlog.server.config import BrokerConfig, ConfigError
from riverlog.server.registration import ClusterMembershipError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", type=Path, help="a Kafka-style server.properties")
    parser.add_argument("--listen", metavar="HOST:PORT", help="listener (sets `listeners`)")
    parser.add_argument("--data-dir", metavar="DIR", help="log directory (sets `log.dirs`)")
    parser.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                        help="join a cluster (sets `zookeeper.connect`)")  # fmt: skip
    parser.add_argument("--broker-id", type=int, metavar="N", help="sets `broker.id`")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="override a server.properties setting (repeatable)")  # fmt: skip
    parser.add_argument("--log-config", metavar="FILE",
                        help="a log4j.properties-style logging config")  # fmt: skip


def _log_state_changes(directory: Path) -> logging.Handler:
    """Kafka's `state-change.log`, here in the broker's (first) log directory, appended to
    across restarts and rolled hourly; its lines stay out of the broker's main log."""
    directory.mkdir(parents=True, exist_ok=True)
    handler = logging.handlers.TimedRotatingFileHandler(
        directory / state_change_log.FILE_NAME,
        when="H",
        backupCount=state_change_log.HOURS_KEPT,
        encoding="utf-8",
    )
    handler.suffix = state_change_log.ROLLED_SUFFIX
    handler.extMatch = re.compile(state_change_log.ROLLED_SUFFIX_PATTERN, re.ASCII)
    handler.setFormatter(logging.Formatter(state_change_log.LINE_FORMAT))
    logger = logging.getLogger(state_change_log.LOGGER_NAME)
    logger.setLevel(state_change_log.TRACE)
    logger.propagate = False
    logger.addHandler(handler)
    return handler


async def _serve(config: BrokerConfig) -> None:
    broker = Broker(config)
    await broker.start()
    host, port = broker.advertised
    print(f"riverlog broker {broker.broker_id} listening on {host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    print("riverlog: shutting down", flush=True)
    await broker.stop()


def run(args: argparse.Namespace) -> int:
    overrides = []  # the shorthands first: an explicit --override of the same key wins
    if args.listen:
        overrides.append(f"listeners=PLAINTEXT://{args.listen}")
    if args.data_dir:
        overrides.append(f"log.dirs={args.data_dir}")
    if args.zookeeper:
        overrides.append(f"zookeeper.connect={args.zookeeper}")
    if args.broker_id is not None:
        overrides.append(f"broker.id={args.broker_id}")
    overrides += args.override
    try:
        config = BrokerConfig.load(args.config, overrides)
        log_config = None
        if args.log_config:
            variables = {"kafka.logs.dir": str(config.data_dir)}
            log_config = log4j_config.load(args.log_config, variables)
            log4j_config.apply(log_config)
    except (ConfigError, OSError, log4j_config.LogConfigError) as e:
        print(f"riverlog server: {e}", file=sys.stderr)
        return 2
    if log_config is None:
        logging.basicConfig(
            level=logging.INFO, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s"
        )
    if log_config is None or state_change_log.LOGGER_NAME not in log_config.loggers:
        _log_state_changes(config.data_dir)
    try:
        asyncio.run(_serve(config))
    except (ClusterMembershipError, ConfigError) as e:  # ConfigError: security settings
        print(f"riverlog server: {e}", file=sys.stderr)
        return 1
    return 0
