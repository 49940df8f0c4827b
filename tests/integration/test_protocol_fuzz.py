"""The protocol fuzzer's short run: a few thousand mutated client frames against a broker
process — 0 broker exceptions, 0 crashes, the RSS bound held (`bench/bench_fuzz.py`, whose
full run sends a million)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def test_a_short_fuzz_run_finds_no_broker_exception() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "bench_fuzz.py"),
            "--frames",
            "2000",
            "--workers",
            "1",
            "--no-coverage",
            "--seed",
            "7",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert "broker exceptions: 0; crashes: 0; codec exceptions in the workers: 0" in done.stdout, (
        done.stdout + done.stderr[-2000:]
    )
    handled = re.search(r"handled by the broker ([\d,]+)", done.stdout)
    assert handled is not None and int(handled.group(1).replace(",", "")) >= 1900
    assert done.returncode == 0, done.stdout
