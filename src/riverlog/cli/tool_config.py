"""Client properties for the tools: Kafka's `--command-config` (and the console tools'
`--producer.config` / `--consumer.config`) files and `--producer-property k=v` flags.

A properties file is read as Java reads it (`riverlog/properties.py`). The keys are handed
to the riverlog client's config parser unchanged, so a key the client does not know stops the
tool with one line naming it — the tool never runs with a setting it silently ignored.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from riverlog.cli import command_config
from riverlog.client.config import AdminConfig
from riverlog.properties import load_properties


def parse_property_flags(items: list[str], flag: str) -> dict[str, str]:
    """`--producer-property k=v` style flags (repeatable) as a mapping."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"Invalid {flag} {item!r}: expected key=value")
        out[key.strip()] = value.strip()
    return out


def add_command_config(parser: argparse.ArgumentParser) -> None:
    """`--command-config`, as `cli/command_config.py` defines it for every admin tool."""
    command_config.add_argument(parser)


def command_properties(args: argparse.Namespace) -> dict[str, str]:
    """Every key of `--command-config` (empty without one), security settings included."""
    path = getattr(args, "command_config", None)
    return load_properties(str(path)) if path else {}


def admin_config(
    bootstrap_servers: str, client_id: str, extra: Mapping[str, str] | None = None
) -> AdminConfig:
    """An admin client config: the file's keys, then the tool's bootstrap servers; the
    tool's client id unless the file names one (as Kafka's tools do)."""
    mapping: dict[str, object] = {"client.id": client_id, **(extra or {})}
    mapping["bootstrap.servers"] = bootstrap_servers
    return AdminConfig.parse(mapping)
