"""Client properties for the tools: Kafka's `--command-config` (and the console tools'
`--producer.config` / `--consumer.config`) files and `--producer-property k=v` flags.

A properties file is read as Java's `java.util.Properties.load` reads it: `#` and `!` start
comment lines, a key ends at the first unescaped `=`, `:` or whitespace, a line ending in an
odd number of backslashes continues on the next, and `\\t`, `\\n`, `\\uXXXX`, ... are escapes.
The keys are handed to the riverlog client's config parser unchanged, so a key the client does
not know (e.g. `security.protocol` until the security work lands) stops the tool with one line
naming it — the tool never runs with a setting it silently ignored.

Invariants: `load_properties` never drops a key it read; later lines override earlier ones.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

from riverlog.cli import command_config
from riverlog.client.config import AdminConfig

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> list[str]:
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        out.append(pending + line)
        pending = ""
    if pending:
        out.append(pending)
    return out


def _unescape(text: str) -> str:
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and i + 6 <= len(text):
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """The key/value pairs of a Java properties text."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        i = 0
        while i < len(line):
            if line[i] == "\\":
                i += 2
                continue
            if line[i] in "=: \t\f":
                break
            i += 1
        key = line[:i]
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":") and (i >= len(line) or line[i] in " \t\f=:"):
            rest = rest[1:].lstrip(" \t\f")
        props[_unescape(key)] = _unescape(rest)
    return props


def load_properties(path: str) -> dict[str, str]:
    """The properties file at `path`; OSError (with the path) when it cannot be read."""
    return parse_properties(Path(path).read_text(encoding="utf-8"))


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
