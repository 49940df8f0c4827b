"""Hypothesis strategies for generated protocol messages, built from the schemas themselves.

The generator's parsed model (`tools/message_schema.py`: `Message`, `Struct`, `Field`) says
which fields exist at each version, their types, nullability and tags; from it we build a
strategy producing an instance of the generated class holding only fields present at that
version (absent ones stay at their defaults, which is what decoding gives back).
"""

from __future__ import annotations

import sys
import uuid
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

import message_schema as schema

from riverlog.protocol import messages

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


@cache
def all_messages() -> tuple[schema.Message, ...]:
    return tuple(schema.load_schemas())


def generated_class(path: str) -> Any:
    obj: Any = messages
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _scalar(type_name: str) -> st.SearchStrategy[Any]:
    if type_name in INT_RANGES:
        low, high = INT_RANGES[type_name]
        return st.integers(low, high)
    if type_name == "bool":
        return st.booleans()
    if type_name == "float64":
        return st.floats(allow_nan=False)
    if type_name == "string":
        return st.text(max_size=12)
    if type_name in ("bytes", "records"):
        return st.binary(max_size=24)
    if type_name == "uuid":
        return st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1))
    raise ValueError(type_name)


def field_strategy(msg: schema.Message, f: schema.Field, version: int) -> st.SearchStrategy[Any]:
    if f.struct is not None:
        element = struct_strategy(msg, f.struct, version)
    else:
        element = _scalar(f.element)
    strategy = st.lists(element, max_size=3) if f.is_array else element
    if version in f.nullable:
        strategy = st.none() | strategy
    return strategy


def struct_strategy(
    msg: schema.Message, struct: schema.Struct, version: int
) -> st.SearchStrategy[Any]:
    cls = generated_class(struct.class_path)
    present = {
        f.attr: field_strategy(msg, f, version) for f in struct.fields if version in f.versions
    }
    return st.builds(cls, **present)


def message_strategy(msg: schema.Message, version: int) -> st.SearchStrategy[Any]:
    return struct_strategy(msg, msg.root, version)


def cases() -> list[tuple[schema.Message, int]]:
    """Every (message, version) pair the generated module implements."""
    return [(m, v) for m in all_messages() for v in range(m.min_version, m.max_version + 1)]
