"""What the benchmarks share: a `riverlog server` child process on a free loopback port,
and a process's CPU seconds so far.

Imported by sibling scripts (`python bench/NAME.py` puts bench/ on the path).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, its ended threads included (Linux
    /proc/PID/stat, in clock ticks: 10 ms)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


@contextlib.contextmanager
def broker_process(*overrides: str) -> Iterator[tuple[str, int]]:
    """`riverlog server` (with `--override`s) on a free loopback port, in a temporary data
    directory: its bootstrap address and process id. Terminated on exit."""
    with tempfile.TemporaryDirectory() as data_dir:
        args = [sys.executable, "-m", "riverlog", "server", "--listen", "127.0.0.1:0"]
        args += ["--data-dir", data_dir]
        for override in overrides:
            args += ["--override", override]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                found = re.search(rb"listening on (127\.0\.0\.1:\d+)", line)
                if found:
                    yield found.group(1).decode(), proc.pid
                    break
            else:
                raise RuntimeError("the broker did not start")
        finally:
            proc.terminate()
            proc.wait(30)


def add_override_argument(parser: argparse.ArgumentParser, example: str) -> None:
    """kafka-server-start.sh's `--override KEY=VALUE` (repeatable), for a bench's brokers."""
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"a broker setting (kafka-server-start.sh's flag), e.g. {example}; repeatable",
    )
