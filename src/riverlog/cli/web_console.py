"""`riverlog console`: the web console (not to be confused with `console-producer` and
`console-consumer`, Kafka's line tools).

    riverlog console --bootstrap-server HOST:PORT [--listen 127.0.0.1:8080]
                     [--command-config client.properties] [--sample-interval-seconds 10]
                     [--lag-history-hours 3]

Serves the pages of `riverlog.webconsole` until SIGINT/SIGTERM. The console connects with the
client config it is given: `--command-config` is a Java properties file of Kafka client keys
(as Kafka's tools take: `security.protocol`, `ssl.*`, `sasl.*` included), merged over
`bootstrap.servers`. A key riverlog's client cannot honour (for example
`sasl.mechanism=GSSAPI`) stops start-up with the reason: the console never connects with less
than it was told to.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

from riverlog.client.config import AdminConfig
from riverlog.properties import load_properties


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server", required=True, metavar="HOST:PORT", help="the broker(s) to connect to"
    )
    parser.add_argument(
        "--listen",
        default="127.0.0.1:8080",
        metavar="HOST:PORT",
        help="where the console serves HTTP (default 127.0.0.1:8080)",
    )
    parser.add_argument(
        "--command-config", metavar="FILE", help="client config properties (Kafka client keys)"
    )
    parser.add_argument(
        "--sample-interval-seconds",
        type=float,
        default=10.0,
        help="how often lag and offsets are sampled (default 10)",
    )
    parser.add_argument(
        "--lag-history-hours",
        type=float,
        default=3.0,
        help="how long samples are kept in memory (default 3)",
    )


def client_config(bootstrap: str, command_config: str | None) -> dict[str, object]:
    """The console's client config; raises ValueError for what the client cannot honour."""
    config: dict[str, object] = {"bootstrap.servers": bootstrap, "client.id": "riverlog-console"}
    if command_config:
        config.update(load_properties(command_config))
    AdminConfig.parse(config)  # unknown keys and bad values stop start-up here
    return config


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--listen {text!r}: expected HOST:PORT")
    return host or "127.0.0.1", int(port)


async def serve(args: argparse.Namespace, config: dict[str, object]) -> None:
    # imported here: aiohttp costs every other `riverlog` command ~0.4 s of start-up otherwise
    from aiohttp import web

    from riverlog.webconsole.app import build_app
    from riverlog.webconsole.history import History
    from riverlog.webconsole.queries import ConsoleClient

    host, port = _host_port(args.listen)
    history = History(int(args.lag_history_hours * 3600_000))
    app = build_app(ConsoleClient(config), history, args.sample_interval_seconds)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        print(
            f"riverlog console: serving http://{host}:{port}/ for {args.bootstrap_server}",
            flush=True,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()


def run(args: argparse.Namespace) -> int:
    try:
        config = client_config(args.bootstrap_server, args.command_config)
        _host_port(args.listen)
    except (ValueError, OSError) as e:
        print(f"riverlog console: {e}", file=sys.stderr)
        return 1
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve(args, config))
    except OSError as e:  # e.g. the listen address is taken
        print(f"riverlog console: {e}", file=sys.stderr)
        return 1
    return 0
