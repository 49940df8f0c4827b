"""Server-side HTML for the console: the page frame (navigation, flash message, error box),
tables, forms and charts. Every value is escaped here, at the one place text becomes HTML:
page modules build `Html` fragments with `h()` / `tag()` / `table()` and never format raw
strings into markup.

Charts are `<div class="chart">` elements carrying their data as JSON in `data-series`;
`static/charts.js` draws them with the vendored uPlot, so the page is complete without it.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence


class Html(str):
    """Markup that is already safe to emit."""


Cell = object


def h(value: object) -> Html:
    """`value` as HTML text: Html passes through, anything else is escaped."""
    if isinstance(value, Html):
        return value
    return Html(html.escape("" if value is None else str(value)))


def tag(element: str, /, *children: object, **attrs: object) -> Html:
    """`<element attrs>children</element>`; attribute names take `_` for `-` and a trailing `_`
    for Python keywords (`class_`); True means a bare attribute, None/False leaves it out."""
    return Html(void(element, **attrs) + "".join(h(c) for c in children) + f"</{element}>")


def void(element: str, /, **attrs: object) -> Html:
    """An element without children or end tag (`<input ...>`), attributes as for `tag`."""
    parts = [element]
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        key = key.rstrip("_").replace("_", "-")
        parts.append(key if value is True else f'{key}="{html.escape(str(value), quote=True)}"')
    return Html(f"<{' '.join(parts)}>")


def join(items: Iterable[object]) -> Html:
    return Html("".join(h(i) for i in items))


def link(href: str, text: object, **attrs: object) -> Html:
    return tag("a", text, href=href, **attrs)


def table(header: Sequence[str], rows: Iterable[Sequence[Cell]], *, id_: str | None = None) -> Html:
    head = tag("tr", *(tag("th", c) for c in header))
    body = join(tag("tr", *(tag("td", c) for c in row)) for row in rows)
    return tag("table", tag("thead", head), tag("tbody", body), id=id_)


def facts(items: Sequence[tuple[str, object]], *, id_: str | None = None) -> Html:
    """A definition list of label: value pairs."""
    return tag(
        "dl", join(Html(tag("dt", k) + tag("dd", v)) for k, v in items), class_="facts", id=id_
    )


def field(label: str, control: Html) -> Html:
    return tag("label", label, " ", control)


def text_input(name: str, value: object = "", **attrs: object) -> Html:
    return void("input", type="text", name=name, value=value, **attrs)


def select(name: str, options: Sequence[tuple[str, str]], chosen: str, **attrs: object) -> Html:
    return tag(
        "select",
        join(tag("option", label, value=v, selected=v == chosen) for v, label in options),
        name=name,
        **attrs,
    )


def form(action: str, *children: object, method: str = "post", **attrs: object) -> Html:
    return tag("form", *children, action=action, method=method, **attrs)


def button(text: str, **attrs: object) -> Html:
    return tag("button", text, type="submit", **attrs)


def chart(
    id_: str, title: str, x: Sequence[float], series: Mapping[str, Sequence[float]], unit: str = ""
) -> Html:
    data = {"x": list(x), "series": {k: list(v) for k, v in series.items()}, "unit": unit}
    return tag(
        "section",
        tag("h3", title),
        tag(
            "div",
            "" if x else "No samples yet.",
            class_="chart",
            id=id_,
            data_series=json.dumps(data, separators=(",", ":")),
        ),
        class_="chart-box",
    )


def human_bytes(n: int | float) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


NAV = [
    ("/", "Brokers"),
    ("/topics", "Topics"),
    ("/groups", "Consumer groups"),
    ("/throughput", "Throughput"),
    ("/reassignments", "Reassignments"),
]


def page(
    title: str,
    body: Html,
    *,
    active: str,
    cluster: str,
    flash: str = "",
    error: str = "",
    scripts: bool = False,
) -> Html:
    """The whole page: head, navigation, the flash/error boxes, `body`."""
    nav = join(
        link(href, label, class_="active" if href == active else None) for href, label in NAV
    )
    head = Html(
        '<meta charset="utf-8"><meta name="viewport" content="width=device-width">'
        + tag("title", f"{title} · riverlog console")
        + '<link rel="stylesheet" href="/static/console.css">'
        + (
            '<link rel="stylesheet" href="/static/uplot-1.6.32.min.css">'
            '<script src="/static/uplot-1.6.32.iife.min.js" defer></script>'
            '<script src="/static/charts.js" defer></script>'
            if scripts
            else ""
        )
    )
    boxes = Html(
        (tag("p", flash, class_="flash", role="status") if flash else "")
        + (tag("p", error, class_="error", role="alert") if error else "")
    )
    header = tag(
        "header",
        tag("strong", "riverlog console"),
        tag("span", cluster, class_="muted"),
        tag("nav", nav),
    )
    return Html(
        "<!doctype html>"
        + tag(
            "html",
            tag("head", head),
            tag("body", header, tag("main", tag("h1", title), boxes, body)),
            lang="en",
        )
    )
