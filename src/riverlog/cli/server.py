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

Start-up fails closed: a bad value, a setting riverlog cannot honour (e.g. a keystore type
other than PEM), a port in use, an unusable or locked data directory, an unreachable
ZooKeeper — each is one line on stderr and exit status 1 (2 for a config that does not
parse), with the traceback only under `--verbose`. Unknown keys are
logged at start-up, one warning each, in Kafka's words.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import logging.handlers
import re
import signal
import sys
import traceback
from pathlib import Path

from riverlog.metadata.store import StoreUnavailableError
from riverlog.server import log4j_config, state_change_log
from riverlog.server.broker import Broker
from riverlog.server.config import BrokerConfig, ConfigError
from riverlog.server.registration import ClusterMembershipError
from riverlog.storage.dir_lock import LogDirLockedError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", type=Path, help="a Kafka-style server.properties")
    parser.add_argument("--listen", metavar="HOST:PORT", help="listener (sets `listeners`)")
    parser.add_argument("--data-dir", metavar="DIR", help="log directory (sets `log.dirs`)")
    parser.add_argument(
        "--zookeeper",
        metavar="HOST:PORT[/CHROOT]",
        help="join a cluster (sets `zookeeper.connect`)",
    )
    parser.add_argument("--broker-id", type=int, metavar="N", help="sets `broker.id`")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a server.properties setting (repeatable)",
    )
    parser.add_argument(
        "--log-config", metavar="FILE", help="a log4j.properties-style logging config"
    )
    parser.add_argument(
        "--verbose", action="store_true", help="print the traceback of a start-up failure"
    )


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


async def _serve(config: BrokerConfig) -> int:
    """Run a broker until SIGINT/SIGTERM (exit status 0) or until every log directory has
    failed (1, after stopping it: Kafka's broker halts then, and a supervisor restarts it
    to recover its logs)."""
    broker = Broker(config)
    try:
        await broker.start()
    except BaseException:
        broker.dir_lock.release()
        raise
    host, port = broker.advertised
    print(f"riverlog broker {broker.broker_id} listening on {host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    waits = [asyncio.ensure_future(e.wait()) for e in (stop, broker.all_dirs_failed)]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for waiting in waits:
        waiting.cancel()
    print("riverlog: shutting down", flush=True)
    await broker.stop()
    return 1 if broker.all_dirs_failed.is_set() else 0


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
        _failed(e, args.verbose)
        return 2
    if log_config is None:
        logging.basicConfig(
            level=logging.INFO, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s"
        )
    for warning in config.unknown_key_warnings():
        logging.getLogger("riverlog.server.config").warning(warning)
    try:
        if log_config is None or state_change_log.LOGGER_NAME not in log_config.loggers:
            _log_state_changes(config.data_dir)
        return asyncio.run(_serve(config))
    except STARTUP_FAILURES as e:
        return _failed(e, args.verbose)


STARTUP_FAILURES = (
    ClusterMembershipError,  # wrong cluster id, broker id taken
    LogDirLockedError,  # another broker on the data directory
    StoreUnavailableError,  # ZooKeeper unreachable
    ConfigError,  # a value only checked when used (listener overrides)
    OSError,  # port in use, data directory not writable
)
"""What ends a start-up with one line: anything else is a bug and keeps its traceback."""


def _failed(error: BaseException, verbose: bool) -> int:
    """One line on stderr (the traceback too with `--verbose`); exit status 1."""
    if verbose:
        traceback.print_exception(error, file=sys.stderr)
    print(f"riverlog server: {error}", file=sys.stderr)
    return 1
