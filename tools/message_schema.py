"""Kafka's JSON message schemas, read into the model `tools/generate_messages.py` emits code
from (and `tests/protocol/schema_strategies.py` builds Hypothesis strategies from).

Inputs: the schemas that the installed `kafka-python` package ships (Kafka 4.x) and our own
schemas in `tools/schemas/` (ZooKeeper-era inter-broker messages Kafka 4 no longer carries).
Model: a `Message` with its root `Struct` and nested structs (leaves first, flat as Kafka's
Java generator has them), each `Field` with its version ranges (`Versions`) for presence,
nullability, taggedness and flexibility.

Invariants. Versions: Kafka 4 dropped some old versions from `validVersions`, but the fields'
own version ranges still describe them, so every request, response and header starts at v0
(the upstream minimum is kept as `schema_min_version`). "none" is the empty range
`NO_VERSIONS`; "N+" runs to `NEVER - 1`. Field attributes are snake_case, a Python keyword
gaining a trailing `_`. `load_schemas` returns the messages in one fixed order (headers first,
then by API key and name), so the generated module is byte-for-byte reproducible.
"""

from __future__ import annotations

import json
import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path

import kafka.protocol.schemas.resources as upstream_resources

OUR_SCHEMAS = Path(__file__).resolve().parent / "schemas"
NEVER = 1 << 15


@dataclass(frozen=True)
class Versions:
    low: int
    high: int  # inclusive; NEVER-1 for "N+"

    @staticmethod
    def parse(text: str | None, default: Versions | None = None) -> Versions:
        if text is None:
            assert default is not None
            return default
        if text == "none":
            return Versions(NEVER, -1)
        if text.endswith("+"):
            return Versions(int(text[:-1]), NEVER - 1)
        if "-" in text:
            low, high = text.split("-")
            return Versions(int(low), int(high))
        return Versions(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        return self.low <= version <= self.high


NO_VERSIONS = Versions(NEVER, -1)


@dataclass
class Field:
    name: str
    attr: str
    type: str  # "int32", "string", "[]int32", "[]Topic", "Topic", ...
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: str | None
    flexible_override: Versions | None
    struct: Struct | None = None

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.struct is not None


@dataclass
class Struct:
    name: str
    class_path: str  # "FetchRequest.FetchTopic"
    fields: list[Field] = field(default_factory=list)


@dataclass
class Message:
    name: str
    kind: str  # request, response, header, data
    api_key: int | None
    min_version: int
    schema_min_version: int
    max_version: int
    flexible: Versions
    root: Struct
    structs: list[Struct]  # nested, leaves first
    unstable_latest: bool


def strip_comments(text: str) -> str:
    """Remove `//` comments that are outside JSON strings."""
    out = []
    for line in text.splitlines():
        in_string = False
        cut = len(line)
        i = 0
        while i < len(line):
            ch = line[i]
            if ch == "\\" and in_string:
                i += 2
                continue
            if ch == '"':
                in_string = not in_string
            elif not in_string and line.startswith("//", i):
                cut = i
                break
            i += 1
        out.append(line[:cut])
    return "\n".join(out)


def snake(name: str) -> str:
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()
    return s + "_" if keyword.iskeyword(s) else s


def parse_message(doc: dict[str, object]) -> Message:
    name = str(doc["name"])
    kind = str(doc["type"])
    valid = Versions.parse(str(doc["validVersions"]))
    flexible = Versions.parse(str(doc.get("flexibleVersions", "none")))
    structs: list[Struct] = []
    by_name: dict[str, Struct] = {}
    pending: list[Field] = []

    def parse_fields(raw_fields: list[dict[str, object]]) -> list[Field]:
        fields = []
        for raw in raw_fields:
            versions = Versions.parse(str(raw["versions"]))
            f = Field(
                name=str(raw["name"]),
                attr=snake(str(raw["name"])),
                type=str(raw["type"]),
                versions=versions,
                nullable=Versions.parse(raw.get("nullableVersions"), NO_VERSIONS),  # type: ignore[arg-type]
                tagged=Versions.parse(raw.get("taggedVersions"), NO_VERSIONS),  # type: ignore[arg-type]
                tag=int(raw["tag"]) if "tag" in raw else None,  # type: ignore[call-overload]
                default=str(raw["default"]) if "default" in raw else None,
                flexible_override=(
                    Versions.parse(str(raw["flexibleVersions"]))
                    if "flexibleVersions" in raw
                    else None
                ),
            )
            element = f.element
            if "fields" in raw:
                child = Struct(element, f"{name}.{element}")
                child.fields = parse_fields(raw["fields"])  # type: ignore[arg-type]
                structs.append(child)
                by_name[element] = child
                f.struct = child
            elif element[0].isupper():
                pending.append(f)  # a commonStruct, resolved below
            fields.append(f)
        return fields

    root = Struct(name, name)
    root.fields = parse_fields(doc["fields"])  # type: ignore[arg-type]
    for common in doc.get("commonStructs", []):  # type: ignore[attr-defined]
        child = Struct(common["name"], f"{name}.{common['name']}")
        child.fields = parse_fields(common["fields"])
        structs.insert(0, child)
        by_name[child.name] = child
    for f in pending:
        f.struct = by_name[f.element]
    schema_min = valid.low
    min_version = 0 if kind in ("request", "response", "header") else valid.low
    return Message(
        name,
        kind,
        doc.get("apiKey"),  # type: ignore[arg-type]
        min_version,
        schema_min,
        valid.high,
        flexible,
        root,
        order_leaves_first(structs),
        bool(doc.get("latestVersionUnstable", False)),
    )


def order_leaves_first(structs: list[Struct]) -> list[Struct]:
    done: list[Struct] = []

    def visit(s: Struct) -> None:
        if s in done:
            return
        for f in s.fields:
            if f.struct is not None:
                visit(f.struct)
        done.append(s)

    for s in structs:
        visit(s)
    return done


def load_schemas() -> list[Message]:
    paths = sorted(Path(upstream_resources.__file__).parent.glob("*.json"))
    paths += sorted(OUR_SCHEMAS.glob("*.json"))
    messages = [parse_message(json.loads(strip_comments(p.read_text()))) for p in paths]
    return sorted(messages, key=lambda m: (m.kind not in ("header",), m.api_key or 0, m.name))


def is_flexible_field(f: Field, flexible: bool, version: int) -> bool:
    if f.flexible_override is not None:
        return version in f.flexible_override
    return flexible


def reachable_versions(msg: Message) -> dict[str, set[int]]:
    """For each struct path, the versions at which the message can contain it."""
    found: dict[str, set[int]] = {s.class_path: set() for s in msg.structs}

    def walk(s: Struct, v: int) -> None:
        for f in s.fields:
            if f.struct is not None and v in f.versions:
                if v not in found[f.struct.class_path]:
                    found[f.struct.class_path].add(v)
                    walk(f.struct, v)
                else:
                    walk(f.struct, v)

    for v in range(msg.min_version, msg.max_version + 1):
        walk(msg.root, v)
    return found
