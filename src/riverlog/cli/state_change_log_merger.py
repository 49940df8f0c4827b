"""`riverlog state-change-log-merger`: Kafka's `kafka.tools.StateChangeLogMerger`.

    riverlog state-change-log-merger (--logs FILE[,FILE...] | --logs-regex DIR/REGEX)
        [--topic T [--partitions P[,P...]]]
        [--start-time "YYYY-MM-DD HH:MM:SS,mmm"] [--end-time "YYYY-MM-DD HH:MM:SS,mmm"]

Merges the `state-change.log` files of several brokers into one story in time order, keeping
the lines of a topic (and of some of its partitions) within a time range. `--logs-regex`
takes every file of DIR whose name matches REGEX (no DIR: the current directory), as Kafka's.

How it works: each file is read lazily, one line at a time; a line counts when it carries a
log4j timestamp (`YYYY-MM-DD HH:MM:SS,mmm`, its first one) — others, such as continuation
lines of a stack trace, are skipped, as Kafka's tool skips them — and passes the filters. The
files' line streams are merged by timestamp with a heap (`heapq.merge`), so memory holds one
line per file whatever the sizes. The timestamps' fixed-width text sorts as their time does;
equal ones keep the order of the files given, and lines of one file keep their order.
A partition is named in a line as `topic-partition` (riverlog's and today's Kafka's lines)
or `[topic,partition]` (Kafka 0.8's).
"""

from __future__ import annotations

import argparse
import heapq
import re
import sys
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path

DATE = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}")
EARLIEST = "0000-00-00 00:00:00,000"
LATEST = "9999-12-31 23:59:59,999"
_TOPIC_CHAR = r"[A-Za-z0-9._-]"
_AFTER_PARTITION = r"(?![A-Za-z0-9_-]|\.[A-Za-z0-9._-])"
"""What may not follow `topic-P`: more of a name (a sentence's full stop may)."""


class MergerError(ValueError):
    """Arguments the tool cannot work with."""


def partition_pattern(topic: str) -> re.Pattern[str]:
    """Finds `topic-P` and `[topic,P]` (group 1 or 2: P), not inside a longer topic name."""
    name = re.escape(topic)
    return re.compile(
        rf"(?<!{_TOPIC_CHAR}){name}-(\d+){_AFTER_PARTITION}"
        rf"|\[{name},\s*(\d+)\]"
    )


def matches(line: str, pattern: re.Pattern[str] | None, partitions: Collection[int] | None) -> bool:
    """Whether `line` names the topic of `pattern` (None: any line), and one of `partitions`
    (None or empty: any partition)."""
    if pattern is None:
        return True
    for found in pattern.finditer(line):
        if not partitions or int(found.group(1) or found.group(2)) in partitions:
            return True
    return False


def dated_lines(
    lines: Iterable[str],
    start: str,
    end: str,
    pattern: re.Pattern[str] | None,
    partitions: Collection[int] | None,
) -> Iterator[tuple[str, str]]:
    """(timestamp, line) of the lines kept, in the order read."""
    for line in lines:
        found = DATE.search(line)
        if found is None:
            continue
        stamp = found.group(0)
        if start <= stamp <= end and matches(line, pattern, partitions):
            yield stamp, line


def merge(
    sources: Sequence[Iterable[str]],
    start: str = EARLIEST,
    end: str = LATEST,
    topic: str | None = None,
    partitions: Collection[int] | None = None,
) -> Iterator[str]:
    """The kept lines of every source, merged in time order (streaming)."""
    pattern = None if topic is None else partition_pattern(topic)

    def keyed(index: int, source: Iterable[str]) -> Iterator[tuple[str, int, int, str]]:
        lines = dated_lines(source, start, end, pattern, partitions)
        for seq, (stamp, line) in enumerate(lines):
            yield stamp, index, seq, line

    streams = [keyed(index, source) for index, source in enumerate(sources)]
    for _, _, _, line in heapq.merge(*streams):
        yield line


def files_matching(spec: str) -> list[Path]:
    """`--logs-regex`: DIR/REGEX → the files of DIR whose name REGEX finds, sorted."""
    spec = spec.replace('"', " ").strip()
    directory, slash, regex = spec.rpartition("/")
    folder = Path(directory or "/") if slash else Path(".")
    try:
        wanted = re.compile(regex)
    except re.error as e:
        raise MergerError(f"bad regular expression {regex!r}: {e}") from None
    if not folder.is_dir():
        raise MergerError(f"{folder} is not a directory")
    return sorted(p for p in folder.iterdir() if p.is_file() and wanted.search(p.name))


def parse_time(text: str, what: str) -> str:
    text = text.replace('"', " ").strip()
    if not DATE.fullmatch(text):
        raise MergerError(f"{what} {text!r} is not in the format YYYY-MM-DD HH:MM:SS,mmm")
    return text


def parse_partitions(text: str) -> list[int]:
    try:
        partitions = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise MergerError(f"--partitions expects partition ids like 0,1,2: {text!r}") from None
    repeated = sorted({p for p in partitions if partitions.count(p) > 1})
    if repeated:
        raise MergerError(
            "The list of partitions contains repeated entries: " + ",".join(map(str, repeated))
        )
    return partitions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--logs", metavar="FILES", help="comma separated list of state change logs")
    parser.add_argument(
        "--logs-regex",
        metavar="REGEX",
        help="regex to match the state change log files to be merged",
    )
    parser.add_argument("--topic", help="the topic whose state change logs should be merged")
    parser.add_argument(
        "--partitions",
        metavar="IDS",
        help="comma separated list of partition ids whose state change logs should be merged",
    )
    parser.add_argument(
        "--start-time",
        default=EARLIEST,
        metavar="TIME",
        help="the earliest timestamp of state change log entries to be merged",
    )
    parser.add_argument(
        "--end-time",
        default=LATEST,
        metavar="TIME",
        help="the latest timestamp of state change log entries to be merged",
    )


def _files(args: argparse.Namespace) -> list[Path]:
    if (args.logs is None) == (args.logs_regex is None):
        raise MergerError(
            'Provide arguments to exactly one of the two options "--logs" or "--logs-regex"'
        )
    if args.logs is not None:
        files = [Path(f.strip()) for f in args.logs.split(",") if f.strip()]
    else:
        files = files_matching(args.logs_regex)
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise MergerError(f"no such file: {', '.join(missing)}")
    if not files:
        raise MergerError("no state change log matches")
    return files


def run(args: argparse.Namespace) -> int:
    try:
        files = _files(args)
        if args.partitions is not None and args.topic is None:
            raise MergerError(
                'The option "--topic" needs to be provided an argument when '
                "specifying partition ids"
            )
        partitions = None if args.partitions is None else parse_partitions(args.partitions)
        start = (
            EARLIEST if args.start_time == EARLIEST else parse_time(args.start_time, "--start-time")
        )
        end = LATEST if args.end_time == LATEST else parse_time(args.end_time, "--end-time")
    except MergerError as e:
        print(e, file=sys.stderr)
        return 1
    handles = [open(f, encoding="utf-8", errors="replace") for f in files]  # noqa: SIM115
    try:
        out = sys.stdout
        for line in merge(handles, start, end, args.topic, partitions):
            out.write(line if line.endswith("\n") else line + "\n")
        out.flush()
    finally:
        for handle in handles:
            handle.close()
    return 0
