"""Java `.properties` text, read as `java.util.Properties.load` reads it: the syntax of
`server.properties` and of every config file a Kafka tool takes (`--command-config`,
`--producer.config`, `--consumer.config`, MirrorMaker's files), so people's files carry over.

`#` and `!` start comment lines; a key ends at the first unescaped `=`, `:` or whitespace, and
one `=` or `:` after it (with whitespace around) is skipped (`key value` is key=value); a line
ending in an odd number of backslashes continues on the next, leading whitespace dropped
(Kafka's docs continue `sasl.jaas.config` lines so); `\\t`, `\\n`, `\\uXXXX`, ... are escapes.

Invariants: no key read is dropped; a later line overrides an earlier one. Pure but for
`load_properties`' one read.
"""

from __future__ import annotations

from pathlib import Path

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
