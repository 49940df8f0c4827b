"""The committed generated module matches what the generator makes from the installed schemas."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

import generate_messages


def test_generated_module_is_current() -> None:
    assert generate_messages.OUTPUT.read_text() == generate_messages.generate(), (
        "src/riverlog/protocol/messages.py is stale: run tools/generate_messages.py"
    )
