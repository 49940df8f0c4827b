"""Every tool's flags have help text, and an unknown flag prints that tool's own usage (not
riverlog's) and exits with status 2, as Kafka's tools print theirs."""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest

from riverlog.cli.main import TOOLS, build_parser, main


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    out = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                out += _parsers(child)
    return out


def test_every_option_has_help() -> None:
    _, tools = build_parser()
    missing = [
        f"{p.prog} {'/'.join(a.option_strings) or a.dest}"
        for tool in tools.values()
        for p in _parsers(tool)
        for a in p._actions
        if a.help is None and not isinstance(a, argparse._SubParsersAction)
    ]
    assert missing == []


@pytest.mark.parametrize("tool", [t.name for t in TOOLS])
def test_unknown_flag_prints_the_tools_usage(tool: str) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exited:
        main([tool, "--no-such-flag-anywhere"])
    assert exited.value.code == 2
    assert err.getvalue().startswith(f"usage: riverlog {tool}")
    assert "--no-such-flag-anywhere" in err.getvalue()
