"""The committed generated module matches what the generator makes from the installed schemas."""

from __future__ import annotations

from tests.protocol.schema_strategies import schema


def test_generated_module_is_current() -> None:
    assert schema.OUTPUT.read_text() == schema.generate(), (
        "src/riverlog/protocol/messages.py is stale: run tools/generate_messages.py"
    )
