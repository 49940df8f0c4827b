"""Run a codec test module with the compiled primitive readers and Produce codec
(`protocol/_prim.c`, `protocol/_produce.c`) and with their pure-Python twins: import
`each_primitives` into the module (an autouse fixture)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from riverlog.protocol import framing, messages, primitives

IMPLEMENTATIONS = [pytest.param(primitives.PYTHON, id="python-primitives")]
if primitives.COMPILED is not None:
    IMPLEMENTATIONS.append(pytest.param(primitives.COMPILED, id="compiled-primitives"))


@pytest.fixture(autouse=True, params=IMPLEMENTATIONS)
def each_primitives(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The generated codec (which looks its readers up at call time) with one implementation."""
    functions: dict[str, Callable[..., Any]] = request.param
    if functions is primitives.PYTHON:
        monkeypatch.setattr(framing, "FAST_PRODUCE", None)
        monkeypatch.setattr(framing, "FAST_PRODUCE_ANSWER", None)
    for name, function in functions.items():
        monkeypatch.setattr(messages, name, function)
        monkeypatch.setattr(primitives, name, function)
