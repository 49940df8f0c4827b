"""The console's message browser as HTML: the form (partition; start at an offset, a
timestamp, the beginning or the last N records; key search; rendering) and the records with
their offsets, timestamps, keys, values and headers.

Rendering of a key or value: `json` pretty-prints valid JSON, `text` decodes UTF-8 (invalid
bytes replaced), `hex` shows the bytes; `auto` picks JSON if it parses, else text if the bytes
are printable UTF-8, else hex. A null is shown as `null`, distinct from empty bytes.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping

from riverlog.client.fetcher import ConsumerRecord
from riverlog.webconsole.html import (
    Html,
    button,
    field,
    form,
    join,
    select,
    table,
    tag,
    text_input,
)

FORMATS = [("auto", "auto"), ("json", "JSON"), ("text", "text"), ("hex", "hex")]
STARTS = [
    ("tail", "last records"),
    ("beginning", "beginning"),
    ("offset", "offset"),
    ("timestamp", "timestamp (ISO datetime or ms)"),
]


def render_bytes(data: bytes | None, how: str) -> tuple[str, str]:
    """(kind shown, text) for `data` rendered as `how`."""
    if data is None:
        return "null", "null"
    if how in ("auto", "json"):
        try:
            return "json", json.dumps(json.loads(data), indent=2, ensure_ascii=False)
        except (ValueError, UnicodeDecodeError):
            if how == "json":
                return "hex", data.hex(" ")
    if how in ("auto", "text"):
        try:
            text = data.decode("utf-8")
            if how == "text" or all(c.isprintable() or c in "\n\t\r" for c in text):
                return "text", text
        except UnicodeDecodeError:
            if how == "text":
                return "text", data.decode("utf-8", "replace")
    return "hex", data.hex(" ")


def _cell(data: bytes | None, how: str) -> Html:
    kind, text = render_bytes(data, how)
    return tag("pre", text, class_=f"value {kind}", data_kind=kind)


def browser_form(action: str, partitions: int, values: Mapping[str, str]) -> Html:
    return form(
        action,
        field(
            "Partition",
            select(
                "partition",
                [(str(p), str(p)) for p in range(partitions)],
                values.get("partition", "0"),
            ),
        ),
        field("Start", select("start", STARTS, values.get("start", "tail"))),
        field("at", text_input("at", values.get("at", ""), size=24)),
        field("Records", text_input("limit", values.get("limit", "50"), size=4)),
        field("Key contains", text_input("key", values.get("key", ""), size=16)),
        field("Show as", select("format", FORMATS, values.get("format", "auto"))),
        button("Show"),
        method="get",
        class_="box inline-form",
        id="browse-form",
    )


def records(found: list[ConsumerRecord], how: str, scanned_to: int, end: int) -> Html:
    def when(ms: int) -> str:
        return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")

    def headers(r: ConsumerRecord) -> Html:
        if not r.headers:
            return Html("")
        return join(
            tag("div", tag("b", k), ": ", render_bytes(v, "auto")[1], class_="header")
            for k, v in r.headers
        )

    rows = [
        [r.offset, when(r.timestamp), _cell(r.key, how), _cell(r.value, how), headers(r)]
        for r in found
    ]
    status = tag(
        "p",
        f"{len(found)} records shown; read up to offset {scanned_to} (log end offset {end}).",
        class_="muted",
        id="browse-status",
    )
    return Html(
        status + table(["Offset", "Timestamp", "Key", "Value", "Headers"], rows, id_="messages")
    )
