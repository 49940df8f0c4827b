"""The generated message classes of `src/riverlog/protocol/messages.py`, as text, for
`tools/generate_messages.py`: each class's docstring, constants, `__slots__` and keyword-only
`__init__` (annotation and default per field), and the `_is_default_X` functions that say
whether a struct holds only its defaults.

Invariants. A field's default is one rule (`default_expr`), used for the `__init__` default,
for what decoding leaves in a field absent at a version, and for deciding whether a tagged
field is left out (at its default); a mutable default (a list, a struct) is built fresh per
instance (`DEFAULT` sentinel), never shared. Output is a pure function of the schema model
(`tools/message_schema.py`), so the generated module is byte-for-byte reproducible.
"""

from __future__ import annotations

from message_schema import NEVER, Field, Message, Struct

PY_TYPE = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "int",
    "uint16": "int",
    "float64": "float",
    "bool": "bool",
    "string": "str",
    "bytes": "bytes",
    "uuid": "uuid.UUID",
    "records": "RecordsValue",
}


def annotation(f: Field, message: Message) -> str:
    elem = f.element
    inner = f.struct.class_path if f.struct is not None else PY_TYPE[elem]
    base = f"list[{inner}]" if f.is_array else inner
    nullable = f.nullable.low <= f.nullable.high and elem != "records"
    return f"{base} | None" if nullable else base


def default_expr(f: Field) -> str:
    """Python expression of the field's default value."""
    d = f.default
    nullable_any = f.nullable.low <= f.nullable.high
    if f.is_array:
        if d == "null" and nullable_any:
            return "None"
        return "[]"
    if f.struct is not None:
        if nullable_any:
            return "None"
        return f"_C_{f.struct.class_path.replace('.', '_')}()"
    t = f.type
    if t == "records":
        return "None"
    if d == "null":
        return "None"
    if t in ("int8", "int16", "int32", "int64", "uint16"):
        return str(int(d, 0)) if d else "0"
    if t == "float64":
        return repr(float(d)) if d else "0.0"
    if t == "bool":
        return "True" if d == "true" else "False"
    if t == "string":
        return repr(d or "")
    if t == "bytes":
        return "b''"
    if t == "uuid":
        return "ZERO_UUID"
    raise ValueError(f"no default for {f.name}: {t}")


def init_default(f: Field) -> tuple[str, str | None]:
    """(parameter default, expression building a fresh mutable default or None)."""
    d = default_expr(f)
    if d == "[]" or d.endswith("()"):
        return "DEFAULT", d
    return d, None


def emit_class(msg: Message, s: Struct, base: str, indent: str, nested: list[Struct]) -> list[str]:
    out = [f"{indent}class {s.name}({base}):"]
    inner = indent + "    "
    body = inner + "    "
    if s is msg.root:
        doc = (
            f"{msg.name}"
            + (f" (API key {msg.api_key})" if msg.api_key is not None else "")
            + f", versions {msg.min_version}-{msg.max_version}"
        )
        if msg.flexible.low < NEVER:
            doc += f", flexible from v{msg.flexible.low}"
        out.append(f'{inner}"""{doc}."""')
        out.append("")
        for child in nested:
            out += emit_class(msg, child, "Struct", inner, [])
            out.append("")
        out.append(f"{inner}NAME = {msg.name!r}")
        out.append(f"{inner}MIN_VERSION = {msg.min_version}")
        out.append(f"{inner}MAX_VERSION = {msg.max_version}")
        if msg.flexible.low < NEVER:
            out.append(f"{inner}FLEXIBLE_FROM = {msg.flexible.low}")
        if msg.kind in ("request", "response"):
            out.append(f"{inner}API_KEY = {msg.api_key}")
            out.append(f"{inner}IS_REQUEST = {msg.kind == 'request'}")
            out.append(f"{inner}SCHEMA_MIN_VERSION = {msg.schema_min_version}")
            out.append(f"{inner}LATEST_VERSION_UNSTABLE = {msg.unstable_latest}")
    else:
        out.append(f"{inner}NAME = {s.class_path!r}")
    flexible = msg.flexible.low < NEVER
    attrs = [f.attr for f in s.fields] + (["unknown_tagged_fields"] if flexible else [])
    out.append(f"{inner}__slots__ = ({''.join(repr(a) + ', ' for a in attrs)})")
    if not attrs:
        return out
    params = ["self", "*"] if attrs else ["self"]
    assigns = []
    for f in s.fields:
        default, fresh = init_default(f)
        params.append(f"{f.attr}: {annotation(f, msg)} = {default}")
        if fresh is None:
            assigns.append(f"{body}self.{f.attr} = {f.attr}")
        else:
            assigns.append(f"{body}self.{f.attr} = {fresh} if {f.attr} is DEFAULT else {f.attr}")
    if flexible:
        params.append("unknown_tagged_fields: dict[int, bytes] | None = None")
        assigns.append(f"{body}self.unknown_tagged_fields = unknown_tagged_fields")
    out.append("")
    out.append(f"{inner}def __init__(")
    out += [f"{body}{p}," for p in params]
    out.append(f"{inner}) -> None:")
    out += assigns
    return out


def is_default_fn(struct: Struct) -> str:
    return f"_is_default_{struct.class_path.replace('.', '_')}"


def emit_is_default(msg: Message, struct: Struct, done: set[str]) -> list[str]:
    """`_is_default_X(o)`: whether every field of the struct holds its default (recursively)."""
    name = is_default_fn(struct)
    if name in done:
        return []
    done.add(name)
    lines: list[str] = []
    checks: list[str] = []
    for f in struct.fields:
        d = default_expr(f)
        if f.is_array:
            checks.append(f"not o.{f.attr}" if d == "[]" else f"o.{f.attr} is None")
        elif f.struct is not None and d != "None":
            lines += emit_is_default(msg, f.struct, done)
            checks.append(f"{is_default_fn(f.struct)}(o.{f.attr})")
        elif d == "None":
            checks.append(f"o.{f.attr} is None")
        else:
            checks.append(f"o.{f.attr} == {d}")
    if msg.flexible.low < NEVER:
        checks.append("not o.unknown_tagged_fields")
    lines.append(f"def {name}(o: {struct.class_path}) -> bool:")
    lines.append("    return (" + "\n            and ".join(checks or ["True"]) + ")")
    lines += ["", ""]
    return lines
