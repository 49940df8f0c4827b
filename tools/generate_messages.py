#!/usr/bin/env python3
"""Generate `src/riverlog/protocol/messages.py` from Kafka's JSON message schemas.

Input: the schemas' model, read by `tools/message_schema.py` (kafka-python's Kafka 4.x schemas
and our own in `tools/schemas/`). Output: one module with a slotted class per message (all
versions), its structs as nested classes (flat, as Kafka's Java generator does; their text is
`tools/message_classes.py`'s), and straight-line encode/decode functions per version, which
this module owns (`StructCode`), with the module's assembly. Consecutive fixed-width fields
are packed with one precompiled `struct.Struct`; a version whose code is identical to an
earlier one reuses that function.

Versions: every request and response is generated from v0 (`tools/message_schema.py` says
why); the upstream minimum is kept as `SCHEMA_MIN_VERSION`. The output is a pure function of
the model: the same schemas give a byte-identical module (`--check`, and CI, rely on it).

    python tools/generate_messages.py           # write the module
    python tools/generate_messages.py --check   # exit 1 when the committed module is stale
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from pathlib import Path

from message_classes import annotation, default_expr, emit_class, emit_is_default, is_default_fn
from message_schema import (
    NEVER,
    Field,
    Message,
    Struct,
    is_flexible_field,
    load_schemas,
    reachable_versions,
)

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "src" / "riverlog" / "protocol" / "messages.py"

FIXED = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint16": "H",
    "float64": "d",
    "bool": "?",
}
FIXED_SIZE = {"b": 1, "h": 2, "i": 4, "q": 8, "H": 2, "d": 8, "?": 1}


# --- code emission -------------------------------------------------------------------------


class Emitter:
    """Emits the module text; owns the table of precompiled struct formats."""

    def __init__(self) -> None:
        self.formats: dict[str, str] = {}

    def struct_var(self, fmt: str) -> str:
        name = "_S_" + fmt.replace("?", "o")
        self.formats[fmt] = name
        return name


READERS = {
    # (type, flexible, nullable) -> reader
    ("string", False, False): "read_string",
    ("string", False, True): "read_nullable_string",
    ("string", True, False): "read_compact_string",
    ("string", True, True): "read_compact_nullable_string",
    ("bytes", False, False): "read_bytes",
    ("bytes", False, True): "read_nullable_bytes",
    ("bytes", True, False): "read_compact_bytes",
    ("bytes", True, True): "read_compact_nullable_bytes",
    ("records", False, True): "read_records",
    ("records", True, True): "read_compact_records",
    ("records", False, False): "read_records",
    ("records", True, False): "read_compact_records",
}
WRITERS = {k: v.replace("read_", "write_") for k, v in READERS.items()}


def fn_name(prefix: str, struct: Struct, version: int) -> str:
    return f"_{prefix}_{struct.class_path.replace('.', '_')}_v{version}"


class StructCode:
    """Encode/decode function bodies of one struct at one version."""

    def __init__(
        self,
        em: Emitter,
        msg: Message,
        struct: Struct,
        version: int,
        child_fn: dict[tuple[str, str, int], str],
    ) -> None:
        self.em = em
        self.msg = msg
        self.struct = struct
        self.version = version
        self.flexible = version in msg.flexible
        self.child_fn = child_fn
        present = [f for f in struct.fields if version in f.versions]
        self.regular = [f for f in present if not (self.flexible and version in f.tagged)]
        self.tagged = sorted(
            (f for f in present if self.flexible and version in f.tagged), key=lambda f: f.tag or 0
        )
        self.class_var = "_C_" + struct.class_path.replace(".", "_")

    def child(self, kind: str, f: Field) -> str:
        assert f.struct is not None
        return self.child_fn[(kind, f.struct.class_path, self.version)]

    # decode ----------------------------------------------------------------------------

    def decode_body(self) -> list[str]:
        lines: list[str] = []
        run: list[Field] = []

        def flush() -> None:
            if not run:
                return
            fmt = "".join(FIXED[f.type] for f in run)
            var = self.em.struct_var(fmt)
            names = ", ".join(f"f_{f.attr}" for f in run)
            lines.append(f"({names},) = {var}.unpack_from(buf, pos)")
            lines.append(f"pos += {sum(FIXED_SIZE[c] for c in fmt)}")
            run.clear()

        for f in self.regular:
            if f.type in FIXED:
                run.append(f)
                continue
            flush()
            lines += self.decode_field(f, "buf", "pos", f"f_{f.attr}")
        flush()
        names = [f.attr for f in self.regular]
        if self.flexible:
            for f in self.tagged:
                lines.append(f"f_{f.attr}: {annotation(f, self.msg)} = {default_expr(f)}")
            lines.append("unknown: dict[int, bytes] | None = None")
            # No tagged fields (a single zero byte) is the common case: no call for it.
            lines.append("if pos < len(buf) and not buf[pos]:")
            lines.append("    pos += 1")
            lines.append("else:")
            lines.append("    n_tags, pos = read_unsigned_varint(buf, pos)")
            lines.append("    for _ in range(n_tags):")
            lines.append("        tag, raw, pos = read_tagged_field(buf, pos)")
            for i, f in enumerate(self.tagged):
                lines.append(f"        {'if' if i == 0 else 'elif'} tag == {f.tag}:")
                lines.append("            _p = 0")
                body = self.decode_field(f, "raw", "_p", f"f_{f.attr}", declare=False)
                lines += ["            " + b for b in body]
            ind = "            " if self.tagged else "        "
            if self.tagged:
                lines.append("        else:")
            lines += [
                f"{ind}if unknown is None:",
                f"{ind}    unknown = {{}}",
                f"{ind}unknown[tag] = bytes(raw)",
            ]
            names += [f.attr for f in self.tagged]
        # Built with `object.__new__` and one store per slot, not through `__init__`: a
        # class call with keywords packs them into a dict and unpacks it again (3-4x the
        # cost of the stores; decoding runs for every request). Every slot is set: the
        # fields absent at this version get their defaults, as `__init__` would give them.
        lines.append(f"o = _new({self.class_var})")
        decoded = set(names)
        for f in self.struct.fields:
            if f.attr in decoded:
                lines.append(f"o.{f.attr} = f_{f.attr}")
            else:
                lines.append(f"o.{f.attr} = {default_expr(f)}")
        if self.msg.flexible.low < NEVER:
            lines.append(f"o.unknown_tagged_fields = {'unknown' if self.flexible else 'None'}")
        lines.append("return o, pos")
        return lines

    def decode_field(
        self, f: Field, buf: str, pos: str, target: str, declare: bool = True
    ) -> list[str]:
        v = self.version
        flex = is_flexible_field(f, self.flexible, v)
        nullable = v in f.nullable
        ann = f": {annotation(f, self.msg)}" if declare else ""
        if f.is_array:
            lines = [f"{target}{ann}"] if declare else []
            lines += [
                f"n, {pos} = read_{'compact_' if flex else ''}array_length({buf}, {pos})",
                "if n < 0:",
                f"    {target} = None" if nullable else f"    check_null_array({f.name!r})",
                "else:",
            ]
            elem = f.element
            if elem in FIXED and elem != "bool":
                code = FIXED[elem]
                lines.append(
                    f"    {target}, {pos} = read_fixed_array({buf}, {pos}, n, "
                    f"{code!r}, {FIXED_SIZE[code]})"
                )
                return lines
            item = f"e_{f.attr}"
            lines += [f"    {target} = []", "    for _ in range(n):"]
            if f.struct is not None:
                lines.append(f"        {item}, {pos} = {self.child('d', f)}({buf}, {pos})")
            elif elem == "uuid":
                lines.append(f"        {item}, {pos} = read_uuid({buf}, {pos})")
            else:
                reader = READERS[(elem, flex, False)]
                lines.append(f"        {item}, {pos} = {reader}({buf}, {pos})")
            lines.append(f"        {target}.append({item})")
            return lines
        if f.struct is not None:
            call = f"{self.child('d', f)}({buf}, {pos})"
            if nullable:
                return [
                    f"{target}{ann} = None",
                    f"({'marker'},) = _S_b.unpack_from({buf}, {pos})",
                    f"{pos} += 1",
                    "if marker >= 0:",
                    f"    {target}, {pos} = {call}",
                ]
            return [f"{target}, {pos} = {call}"]
        if f.type in FIXED:
            var = self.em.struct_var(FIXED[f.type])
            return [
                f"({target},) = {var}.unpack_from({buf}, {pos})",
                f"{pos} += {FIXED_SIZE[FIXED[f.type]]}",
            ]
        if f.type == "uuid":
            return [f"{target}, {pos} = read_uuid({buf}, {pos})"]
        reader = READERS[(f.type, flex, nullable)]
        return [f"{target}, {pos} = {reader}({buf}, {pos})"]

    # encode ----------------------------------------------------------------------------

    def encode_body(self) -> list[str]:
        lines: list[str] = []
        run: list[Field] = []

        def flush() -> None:
            if not run:
                return
            fmt = "".join(FIXED[f.type] for f in run)
            var = self.em.struct_var(fmt)
            lines.append(f"out.append({var}.pack({', '.join(f'o.{f.attr}' for f in run)}))")
            run.clear()

        for f in self.regular:
            if f.type in FIXED:
                run.append(f)
                continue
            flush()
            lines += self.encode_field(f, "out")
        flush()
        if self.flexible and not self.tagged:  # only unknown tagged fields, seldom any
            lines.append("if o.unknown_tagged_fields:")
            lines.append("    write_tagged_fields(out, list(o.unknown_tagged_fields.items()))")
            lines.append("else:")
            lines.append("    out.append(b'\\x00')")
        elif self.flexible:
            lines.append("tagged: list[tuple[int, bytes]] = []")
            for f in self.tagged:
                cond = self.non_default_condition(f)
                lines.append(f"if {cond}:")
                lines.append(f"    t_{f.attr}: list[Chunk] = []")
                lines += ["    " + x for x in self.encode_field(f, f"t_{f.attr}")]
                lines.append(f"    tagged.append(({f.tag}, join_chunks(t_{f.attr})))")
            lines.append("if o.unknown_tagged_fields:")
            lines.append("    tagged.extend(o.unknown_tagged_fields.items())")
            lines.append("write_tagged_fields(out, tagged)")
        if not lines:
            lines.append("pass")
        return lines

    def non_default_condition(self, f: Field) -> str:
        d = default_expr(f)
        if f.struct is not None and not f.is_array and d != "None":
            # A generated field-by-field check: Struct.__eq__ against a fresh default costs
            # ~10x more, on every partition of every fetch response.
            return f"not {is_default_fn(f.struct)}(o.{f.attr})"
        if f.is_array:
            return f"o.{f.attr}" if d == "[]" else f"o.{f.attr} is not None"
        if d == "None":
            return f"o.{f.attr} is not None"
        return f"o.{f.attr} != {d}"

    def encode_field(self, f: Field, out: str) -> list[str]:
        v = self.version
        flex = is_flexible_field(f, self.flexible, v)
        nullable = v in f.nullable
        if f.is_array:
            lines = [
                f"{out}.append(write_{'compact_' if flex else ''}array_length("
                f"o.{f.attr}, {nullable}))"
            ]
            elem = f.element
            if elem in FIXED and elem != "bool":
                lines += [
                    f"if o.{f.attr}:",
                    f"    {out}.append(write_fixed_array(o.{f.attr}, {FIXED[elem]!r}))",
                ]
                return lines
            item = f"e_{f.attr}"
            lines.append(f"for {item} in o.{f.attr} or ():")
            if f.struct is not None:
                lines.append(f"    {self.child('e', f)}({item}, {out})")
            elif elem == "uuid":
                lines.append(f"    {out}.append(write_uuid({item}))")
            else:
                lines.append(f"    {out}.append({WRITERS[(elem, flex, False)]}({item}))")
            return lines
        if f.struct is not None:
            call = self.child("e", f)
            if nullable:
                return [
                    f"if o.{f.attr} is None:",
                    f"    {out}.append(b'\\xff')",
                    "else:",
                    f"    {out}.append(b'\\x01')",
                    f"    {call}(o.{f.attr}, {out})",
                ]
            return [
                f"{call}(require(o.{f.attr}), {out})"
                if f.nullable.low <= f.nullable.high
                else f"{call}(o.{f.attr}, {out})"
            ]
        if f.type in FIXED:
            var = self.em.struct_var(FIXED[f.type])
            return [f"{out}.append({var}.pack(o.{f.attr}))"]
        if f.type == "uuid":
            return [f"{out}.append(write_uuid(o.{f.attr}))"]
        if f.type == "records":
            return [f"write_{'compact_' if flex else ''}records({out}, o.{f.attr})"]
        return [f"{out}.append({WRITERS[(f.type, flex, nullable)]}(o.{f.attr}))"]


def emit_message(em: Emitter, msg: Message) -> list[str]:
    base = "ApiMessage" if msg.kind in ("request", "response") else "Struct"
    lines = [*emit_class(msg, msg.root, base, "", msg.structs), "", ""]
    all_structs = [*msg.structs, msg.root]
    for s in all_structs:
        lines.append(f"_C_{s.class_path.replace('.', '_')} = {s.class_path}")
    lines.append("")
    done: set[str] = set()
    for s in all_structs:
        for f in s.fields:
            if f.struct is not None and not f.is_array and f.tagged.low <= f.tagged.high:
                lines += emit_is_default(msg, f.struct, done)
    reach = reachable_versions(msg)
    reach[msg.root.class_path] = set(range(msg.min_version, msg.max_version + 1))
    child_fn: dict[tuple[str, str, int], str] = {}
    for s in all_structs:
        seen: dict[tuple[str, str], str] = {}
        for v in sorted(reach[s.class_path]):
            code = StructCode(em, msg, s, v, child_fn)
            for kind, body, sig in (
                (
                    "d",
                    code.decode_body(),
                    f"(buf: memoryview, pos: int) -> tuple[{s.class_path}, int]",
                ),
                ("e", code.encode_body(), f"(o: {s.class_path}, out: list[Chunk]) -> None"),
            ):
                text = "\n".join("    " + b for b in body)
                key = (kind, text)
                if key not in seen:
                    name = fn_name(kind, s, v)
                    seen[key] = name
                    lines += [f"def {name}{sig}:", text, "", ""]
                child_fn[(kind, s.class_path, v)] = seen[key]
    root = msg.root.class_path
    versions = range(msg.min_version, msg.max_version + 1)
    pad = ["_unsupported"] * msg.min_version
    enc = pad + [child_fn[("e", root, v)] for v in versions]
    dec = pad + [child_fn[("d", root, v)] for v in versions]
    lines.append(f"{root}._ENCODERS = ({', '.join(enc)},)")
    lines.append(f"{root}._DECODERS = ({', '.join(dec)},)")
    lines += ["", ""]
    return lines


def generate() -> str:
    messages = load_schemas()
    em = Emitter()
    body: list[str] = []
    for msg in messages:
        body += emit_message(em, msg)
    requests = [m for m in messages if m.kind == "request"]
    responses = [m for m in messages if m.kind == "response"]
    body.append("REQUESTS: dict[int, type[ApiMessage]] = {")
    body += [f"    {m.api_key}: {m.name}," for m in requests]
    body.append("}")
    body.append('"""Request body class by API key."""')
    body.append("")
    body.append("RESPONSES: dict[int, type[ApiMessage]] = {")
    body += [f"    {m.api_key}: {m.name}," for m in responses]
    body.append("}")
    body.append('"""Response body class by API key."""')
    version = metadata.version("kafka-python")
    head = [
        '"""Kafka protocol messages, every version. GENERATED by tools/generate_messages.py from',
        f"the JSON message schemas of kafka-python {version} and tools/schemas/ — do not edit.",
        "",
        "One class per message with its structs nested; `Message.encode(version)`,",
        "`Message.decode(data, version)` and `encode_chunks` come from `riverlog.protocol.api`.",
        '"""',
        "# ruff: noqa",
        "",
        "from __future__ import annotations",
        "",
        "import struct",
        "import uuid",
        "from typing import Any, NoReturn",
        "",
        "from riverlog.protocol.api import DEFAULT, ApiMessage, Struct",
        "from riverlog.protocol.exceptions import EncodeError",
        "from riverlog.protocol.primitives import (",
        "    ZERO_UUID, Chunk, RecordsValue, check_null_array, join_chunks, read_array_length,",
        "    read_bytes, read_compact_array_length, read_compact_bytes,",
        "    read_compact_nullable_bytes, read_compact_nullable_string, read_compact_records,",
        "    read_compact_string, read_fixed_array, read_nullable_bytes, read_nullable_string,",
        "    read_records, read_string, read_tagged_field, read_unsigned_varint, read_uuid,",
        "    require, write_array_length, write_bytes, write_compact_array_length,",
        "    write_compact_bytes, write_compact_nullable_bytes, write_compact_nullable_string,",
        "    write_compact_records, write_compact_string, write_fixed_array, write_nullable_bytes,",
        "    write_nullable_string, write_records, write_string, write_tagged_fields, write_uuid,",
        ")",
        "",
    ]
    em.struct_var("b")
    for fmt, var in sorted(em.formats.items(), key=lambda kv: kv[1]):
        head.append(f"{var} = struct.Struct('>{fmt}')")
    head += [
        "",
        "",
        "_new = object.__new__",
        '"""Decoders build structs with this and one store per slot."""',
        "",
        "",
        "def _unsupported(*args: Any) -> NoReturn:",
        '    raise EncodeError("version below the minimum")',
        "",
        "",
    ]
    return "\n".join(head + body).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the module is stale")
    args = parser.parse_args()
    text = generate()
    if args.check:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print(
                f"{OUTPUT.relative_to(ROOT)} is stale: run tools/generate_messages.py",
                file=sys.stderr,
            )
            return 1
        print(f"{OUTPUT.relative_to(ROOT)} is current")
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
