"""Run `python -m MODULE ...` with a bytecode counter switched by signals: deterministic
interpreter work per Python function, which callgrind (C functions only) cannot show.

    python tools/opcount.py [PYTHON] -m riverlog server ...

SIGUSR1 starts counting on the main thread (the broker's event loop): every bytecode
executed, by code object — self, inclusive (with what it calls; a coroutine counts from each
resumption to its next suspension) — and calls. SIGUSR2 stops, writes the counts as JSON to
`$OPCOUNT_OUT.<pid>.<n>` (n = 0, 1, ... per dump) and resets them. Counting costs ~50x the
interpreter's time: compare runs, not clocks. Used by `tools/callgrind_replication.py
--opcodes`. A leading interpreter path (a command prefix's) is skipped.
"""

from __future__ import annotations

import collections
import json
import os
import runpy
import signal
import sys
from types import CodeType, FrameType
from typing import Any

self_ops: collections.Counter[CodeType] = collections.Counter()
inclusive_ops: collections.Counter[CodeType] = collections.Counter()
calls: collections.Counter[CodeType] = collections.Counter()
stack: list[tuple[CodeType, int]] = []
executed = [0]
dumps = [0]


def name(code: CodeType) -> str:
    path = code.co_filename.rsplit("/src/", 1)[-1].rsplit("/python3.11/", 1)[-1]
    return f"{path}:{code.co_firstlineno}:{code.co_qualname}"


def local(frame: FrameType, event: str, arg: Any) -> Any:
    if event == "opcode":
        executed[0] += 1
        self_ops[frame.f_code] += 1
    elif event == "return" and stack:
        code, start = stack.pop()
        inclusive_ops[code] += executed[0] - start
    return local


def tracer(frame: FrameType, event: str, arg: Any) -> Any:
    if event != "call":
        return None
    frame.f_trace_opcodes = True
    stack.append((frame.f_code, executed[0]))
    calls[frame.f_code] += 1
    return local


def start(*_: object) -> None:
    stack.clear()
    sys.settrace(tracer)


def dump(*_: object) -> None:
    sys.settrace(None)
    out = f"{os.environ.get('OPCOUNT_OUT', '/tmp/opcount')}.{os.getpid()}.{dumps[0]}"
    dumps[0] += 1
    codes = set(self_ops) | set(inclusive_ops) | set(calls)
    rows: dict[str, list[int]] = {}
    for code in codes:
        row = rows.setdefault(name(code), [0, 0, 0])
        row[0] += self_ops[code]
        row[1] += inclusive_ops[code]
        row[2] += calls[code]
    with open(out + ".tmp", "w") as f:
        json.dump({"total": executed[0], "rows": rows}, f)
    os.replace(out + ".tmp", out)
    for counter in (self_ops, inclusive_ops, calls):
        counter.clear()
    stack.clear()
    executed[0] = 0


def main() -> None:
    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, dump)
    args = sys.argv[1:]
    if args and args[0] != "-m":
        args = args[1:]
    if len(args) < 2 or args[0] != "-m":
        sys.exit("usage: opcount.py [PYTHON] -m MODULE [ARGS...]")
    sys.argv = [args[1], *args[2:]]
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
