"""`--command-config FILE`: a tool's client settings, Kafka's `.properties` file
(`security.protocol`, `ssl.*`, `sasl.*`, `sasl.jaas.config`), as the riverlog client's
`ClientSecurity`; the console tools' `--producer.config` / `--consumer.config` likewise.
Keys other than security settings are ignored."""

from __future__ import annotations

import argparse
from pathlib import Path

from riverlog.client.connection import PLAINTEXT
from riverlog.client.security import ClientSecurity, is_security_key
from riverlog.properties import parse_properties


def add_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        type=Path,
        help="client settings (security.protocol, ssl.*, sasl.*) in a properties file",
    )


def security_properties(path: Path | None) -> dict[str, str]:
    """The security settings of a client properties file (none without one)."""
    if path is None:
        return {}
    return {k: v for k, v in parse_properties(path.read_text()).items() if is_security_key(k)}


def security(args: argparse.Namespace) -> ClientSecurity:
    """The security settings of `--command-config` (PLAINTEXT without the flag); ValueError
    (or OSError) for a file that cannot be used."""
    path: Path | None = getattr(args, "command_config", None)
    if path is None:
        return PLAINTEXT
    return ClientSecurity.from_config(security_properties(path))
