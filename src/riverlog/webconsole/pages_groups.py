"""The console's consumer-group pages as HTML bodies: the group list (state, members, lag
from the latest sample), one group (members and assignment, lag per partition, lag over time
from the console's history) and its reset-offsets form with the dry-run preview.

Reset scenarios are those of `kafka-consumer-groups.sh --reset-offsets` and are planned by
the same code as `riverlog consumer-groups` (`cli.group_tables.plan_reset`).
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote

from riverlog.client.group_admin import GroupListing
from riverlog.model import TopicPartition
from riverlog.webconsole.history import History, group_lag
from riverlog.webconsole.html import (
    Html,
    button,
    chart,
    facts,
    field,
    form,
    join,
    link,
    select,
    table,
    tag,
    text_input,
)
from riverlog.webconsole.queries import GroupView

SCENARIOS = [
    ("earliest", "to earliest"),
    ("latest", "to latest"),
    ("current", "to current"),
    ("offset", "to offset"),
    ("shift", "shift by"),
    ("datetime", "to datetime"),
    ("duration", "by duration"),
]
INACTIVE = ("Empty", "Dead")


def group_href(group: str) -> str:
    return "/groups/" + quote(group, safe="")


def group_list(groups: list[GroupListing], history: History) -> Html:
    latest = history.latest
    rows = []
    for g in groups:
        lag = group_lag(latest, g.group_id) if latest is not None else {}
        rows.append(
            [
                link(group_href(g.group_id), g.group_id),
                g.state or "-",
                g.protocol_type or "-",
                ", ".join(sorted(lag)) or "-",
                sum(lag.values()) if latest is not None else "not sampled yet",
            ]
        )
    note = tag("p", "Lag from the console's latest sample.", class_="muted")
    return Html(note + table(["Group", "State", "Protocol", "Topics", "Lag"], rows, id_="groups"))


def _assignment(assignment: Mapping[str, list[int]]) -> str:
    return (
        "; ".join(f"{t}: {','.join(map(str, ps))}" for t, ps in sorted(assignment.items())) or "-"
    )


def group(view: GroupView, history: History, reset_form: Html) -> Html:
    d = view.description
    summary = facts(
        [
            ("State", d.state),
            ("Protocol", d.protocol_type or "-"),
            ("Assignor", d.protocol or "-"),
            ("Coordinator", view.coordinator),
            ("Members", len(d.members)),
            ("Total lag", view.total_lag),
        ],
        id_="group-summary",
    )
    members = (
        table(
            ["Member", "Client id", "Host", "Instance id", "Assignment"],
            [
                [
                    m.member_id,
                    m.client_id,
                    m.client_host,
                    m.group_instance_id or "-",
                    _assignment(m.assignment),
                ]
                for m in d.members
            ],
            id_="members",
        )
        if d.members
        else tag("p", "No active members.")
    )
    lag_table = table(
        ["Topic", "Partition", "Committed offset", "Log end offset", "Lag", "Owner"],
        [
            [
                r.topic,
                r.partition,
                "-" if r.committed is None else r.committed,
                r.end,
                "-" if r.lag is None else r.lag,
                r.owner,
            ]
            for r in view.rows
        ],
        id_="lag",
    )
    times, series = history.lag_series(d.group_id)
    return Html(
        summary
        + tag("h2", "Lag per partition")
        + lag_table
        + chart("lag-chart", "Lag over time (records)", times, series, "records")
        + tag("h2", "Members")
        + members
        + reset_form
    )


def reset_form(group: str, topics: list[str], values: Mapping[str, str]) -> Html:
    action = group_href(group) + "/reset"
    return form(
        action,
        tag("h2", "Reset offsets"),
        field(
            "Topic",
            select(
                "topic",
                [("", "all topics of the group")] + [(t, t) for t in topics],
                values.get("topic", ""),
            ),
        ),
        field("Scenario", select("scenario", SCENARIOS, values.get("scenario", "earliest"))),
        field(
            "Value (offset, shift, ISO datetime or ISO duration)",
            text_input("value", values.get("value", ""), size=26),
        ),
        button("Dry run", name="action", value="dry-run"),
        button("Execute", name="action", value="execute", class_="danger"),
        class_="box",
        id="reset-form",
    )


def reset_preview(
    plan: dict[TopicPartition, int],
    committed: dict[TopicPartition, int],
    executed: bool,
    state: str,
) -> Html:
    title = "Offsets reset" if executed else "Dry run: nothing changed"
    warning = (
        tag(
            "p",
            f"The group is {state}: offsets can only be reset while it has no active "
            "members (Empty).",
            class_="warn",
        )
        if state not in INACTIVE and not executed
        else Html("")
    )
    rows = [[t, p, committed.get((t, p), "-"), new] for (t, p), new in sorted(plan.items())]
    return Html(
        tag("h2", title)
        + warning
        + table(["Topic", "Partition", "Current offset", "New offset"], rows, id_="reset-plan")
    )


def reset_page(form_html: Html, preview: Html | None) -> Html:
    return join([preview or "", form_html])
