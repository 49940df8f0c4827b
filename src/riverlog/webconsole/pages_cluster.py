"""The console's cluster pages as HTML bodies: brokers, the topic list (with the create form),
one topic (partitions, offsets, sizes, configs, and the forms to add partitions, edit configs
and delete it), partition reassignments in progress, and throughput per topic.

Pure rendering: each function takes what `queries` returned and gives back `Html`.
"""

from __future__ import annotations

from urllib.parse import quote

from riverlog.client import admin_requests as admin
from riverlog.webconsole.history import History
from riverlog.webconsole.html import (
    Html,
    button,
    chart,
    facts,
    field,
    form,
    human_bytes,
    join,
    link,
    table,
    tag,
    text_input,
)
from riverlog.webconsole.queries import BrokerRow, PartitionOffsets, TopicRow


def topic_href(name: str) -> str:
    return "/topics/" + quote(name, safe="")


def _ids(ids: list[int]) -> str:
    return ",".join(map(str, ids))


def brokers(view: admin.ClusterView, rows: list[BrokerRow]) -> Html:
    partitions = [p for t in view.topics for p in t.partitions]
    under = sum(1 for p in partitions if len(p.isr) < len(p.replicas))
    offline = sum(1 for p in partitions if p.leader < 0)
    summary = facts(
        [
            ("Cluster id", view.cluster_id or "unknown"),
            ("Controller", view.controller if view.controller >= 0 else "none"),
            ("Brokers", len(rows)),
            ("Topics", len(view.topics)),
            ("Partitions", len(partitions)),
            ("Under-replicated partitions", under),
            ("Offline partitions", offline),
        ],
        id_="cluster-summary",
    )

    def health(r: BrokerRow) -> Html:
        if not r.reachable:
            return tag("span", "unreachable: " + r.error, class_="bad")
        if r.out_of_isr:
            return tag("span", f"up, {r.out_of_isr} replicas out of ISR", class_="warn")
        return tag("span", f"up ({r.rtt_ms:.1f} ms)", class_="good")

    def disk(r: BrokerRow) -> Html:
        return join(
            tag(
                "div",
                f"{d.path}: {human_bytes(d.size)}"
                + (
                    f" of {human_bytes(d.total_bytes)}, {human_bytes(d.usable_bytes)} free"
                    if d.total_bytes >= 0
                    else ""
                )
                + (f" (error {d.error_code})" if d.error_code else ""),
            )
            for d in r.log_dirs
        )

    def versions(r: BrokerRow) -> str:
        if not r.api_count:
            return "-"
        return f"{r.api_count} APIs; " + ", ".join(f"{k} v{v}" for k, v in r.versions.items())

    body = table(
        [
            "Id",
            "Host",
            "Rack",
            "Controller",
            "Health",
            "Leaders",
            "Replicas",
            "Disk use",
            "Protocol versions",
        ],
        [
            [
                r.node_id,
                f"{r.host}:{r.port}",
                r.rack or "-",
                "yes" if r.is_controller else "",
                health(r),
                r.leaders,
                r.replicas,
                disk(r),
                versions(r),
            ]
            for r in rows
        ],
        id_="brokers",
    )
    return Html(summary + body)


def topic_list(rows: list[TopicRow], show_internal: bool) -> Html:
    shown = [r for r in rows if show_internal or not r.internal]
    toggle = link(
        "/topics" + ("" if show_internal else "?internal=1"),
        "hide internal topics" if show_internal else "show internal topics",
    )
    body = table(
        ["Topic", "Partitions", "Replication factor", "Under-replicated", "Offline", "Size"],
        [
            [
                link(topic_href(r.name), r.name),
                len(r.partitions),
                r.replication_factor,
                r.under_replicated,
                r.offline,
                human_bytes(r.size),
            ]
            for r in shown
        ],
        id_="topics",
    )
    create = form(
        "/topics",
        tag("h2", "Create a topic"),
        field("Name", text_input("name", required=True)),
        field("Partitions", text_input("partitions", "1", size=4)),
        field("Replication factor", text_input("replication_factor", "-1", size=4)),
        field("Configs (key=value, one a line)", tag("textarea", "", name="configs", rows=2)),
        button("Create topic"),
        class_="box",
    )
    return Html(tag("p", toggle) + body + create)


def topic(row: TopicRow, parts: list[PartitionOffsets], configs: dict[str, str]) -> Html:
    name = row.name
    base = topic_href(name)
    summary = facts(
        [
            ("Partitions", len(parts)),
            ("Replication factor", row.replication_factor),
            ("Under-replicated partitions", row.under_replicated),
            ("Records", sum(p.end - p.start for p in parts)),
            ("Size", human_bytes(row.size)),
            ("Internal", "yes" if row.internal else "no"),
        ],
        id_="topic-summary",
    )
    partition_table = table(
        [
            "Partition",
            "Leader",
            "Replicas",
            "ISR",
            "Under-replicated",
            "Start offset",
            "End offset",
            "Size",
            "",
        ],
        [
            [
                p.partition.partition,
                p.partition.leader if p.partition.leader >= 0 else "none",
                _ids(p.partition.replicas),
                _ids(p.partition.isr),
                "yes" if len(p.partition.isr) < len(p.partition.replicas) else "",
                p.start,
                p.end,
                human_bytes(p.size),
                link(f"{base}/messages?partition={p.partition.partition}", "messages"),
            ]
            for p in parts
        ],
        id_="partitions",
    )
    config_table = (
        table(["Config", "Value"], sorted(configs.items()), id_="configs")
        if configs
        else tag("p", "No overrides: every config has the broker's default.")
    )
    grow = form(
        f"{base}/partitions",
        tag("h3", "Add partitions"),
        field("New partition count", text_input("count", len(parts) + 1, size=4)),
        button("Add partitions"),
        class_="box",
    )
    edit = form(
        f"{base}/configs",
        tag("h3", "Edit configs"),
        field("Set (key=value, one a line)", tag("textarea", "", name="set", rows=2)),
        field("Delete (keys, comma separated)", text_input("delete")),
        button("Apply"),
        class_="box",
    )
    delete = form(
        f"{base}/delete",
        tag("h3", "Delete topic"),
        tag("p", "This deletes the topic and all its records. Type its name to confirm."),
        field("Topic name", text_input("confirm", autocomplete="off")),
        button("Delete topic", class_="danger"),
        class_="box",
    )
    return Html(
        summary
        + tag("p", link(f"{base}/messages", "Browse messages"))
        + tag("h2", "Partitions")
        + partition_table
        + tag("h2", "Config overrides")
        + config_table
        + tag("div", grow, edit, delete, class_="forms")
    )


def reassignments(moves: dict[tuple[str, int], admin.PartitionReassignment]) -> Html:
    if not moves:
        return tag("p", "No partition reassignments in progress.", id="no-reassignments")
    return table(
        ["Topic", "Partition", "Replicas", "Adding", "Removing"],
        [
            [t, p, _ids(m.replicas), _ids(m.adding), _ids(m.removing)]
            for (t, p), m in sorted(moves.items())
        ],
        id_="reassignments",
    )


def throughput(history: History, chosen: str | None) -> Html:
    topics = history.topics()
    picker = tag(
        "ul",
        join(tag("li", link("/throughput?topic=" + quote(t, safe=""), t)) for t in topics),
        class_="inline",
    )
    note = tag(
        "p",
        "From the console's own samples of offsets and log sizes (no metrics "
        "needed): bytes out are estimated as records consumed by groups times the "
        "topic's mean record size.",
        class_="muted",
    )
    if chosen is None:
        return Html(note + picker)
    rates = history.rates(chosen)
    return Html(
        note
        + picker
        + chart(
            "bytes-chart",
            f"{chosen}: bytes per second",
            rates.at_s,
            {"in": rates.bytes_in, "out (est.)": rates.bytes_out},
            "B/s",
        )
        + chart(
            "messages-chart",
            f"{chosen}: records per second",
            rates.at_s,
            {"in": rates.messages_in, "out": rates.messages_out},
            "records/s",
        )
    )
