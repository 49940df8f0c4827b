"""The history checker of the fault suite: what a run's producers, consumers and a final read
saw, and every anomaly that proves the log broke a promise. Pure: no I/O, no clock.

A history is built from the JSON event lines of `riverlog verifiable-producer` and
`riverlog verifiable-consumer --verbose` (Kafka's tools print the same lines), one list per
process, plus a final read of every partition from its start to its end, taken after the
faults stopped and the cluster healed. In the spirit of Jepsen's Kafka workload it reports:

- `lost`: a value acknowledged (`producer_send_success`) that the final read does not hold;
- `duplicate`: a value stored at more than one offset (an idempotent or transactional producer
  must have none; a plain producer's retries may make some, reported all the same);
- `divergent`: one (partition, offset) seen holding two different values — by an ack, a
  consumer or the final read (the log was truncated or rewritten under a reader);
- `reordered`: one producer's values to one partition stored out of send order;
- `nonmonotonic_poll`: a consumer handed out an offset at or below one it already handed out
  for that partition, with no reassignment in between;
- `poll_skip`: a consumer jumped over offsets that the final log holds, with no reassignment;
- `commit_backwards`: a group's successful commit for a partition below one that had already
  succeeded when it was sent. A commit is an interval, not an instant: it is sent after the
  consumer's previous event (the tool commits right after its `records_consumed` line) and
  takes effect at the coordinator before its `offsets_committed` line, which may come much
  later (a response held up by the network). Only a commit sent after a higher one succeeded
  proves the group's offset went backwards (finding 13 of docs/fault-suite.md);
- `unexpected`: a value read (by anyone) that no producer ever tried to send;
- `aborted_read` / `non_atomic`: for transactions (`Transaction`): a value of an aborted
  transaction was read, or a committed transaction is only partly in the final log;
- `incomplete`: a producer's history has no `shutdown_complete`, so sends it made may be
  missing from the history and `unexpected` cannot be trusted for it.

Invariants: `check` never mutates the history; every anomaly names the values or offsets that
prove it, so a finding can be looked up in the brokers' logs; an empty history is clean.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

Event = Mapping[str, Any]
Position = tuple[int, int]
"""(partition, offset)"""

KINDS = (
    "lost",
    "duplicate",
    "divergent",
    "reordered",
    "nonmonotonic_poll",
    "poll_skip",
    "commit_backwards",
    "unexpected",
    "aborted_read",
    "non_atomic",
    "incomplete",
)


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    value: str


@dataclass(frozen=True)
class Transaction:
    """The values one transaction wrote, and whether its commit was acknowledged."""

    values: tuple[str, ...]
    committed: bool


@dataclass
class History:
    topic: str
    producers: dict[str, list[Event]] = field(default_factory=dict)
    consumers: dict[str, list[Event]] = field(default_factory=dict)
    """consumer name -> its events; `group` groups consumers by their group id."""
    groups: dict[str, str] = field(default_factory=dict)
    """consumer name -> group id (consumers not listed share the group "")."""
    final: list[Record] = field(default_factory=list)
    transactions: list[Transaction] = field(default_factory=list)


@dataclass(frozen=True)
class Anomaly:
    kind: str
    detail: str


@dataclass
class Report:
    acknowledged: int = 0
    attempted: int = 0
    read: int = 0
    anomalies: list[Anomaly] = field(default_factory=list)

    def of(self, kind: str) -> list[Anomaly]:
        return [a for a in self.anomalies if a.kind == kind]

    def counts(self) -> dict[str, int]:
        return {kind: len(self.of(kind)) for kind in KINDS}

    @property
    def ok(self) -> bool:
        return not self.anomalies

    def summary(self) -> str:
        found = ", ".join(f"{k} {n}" for k, n in self.counts().items() if n) or "no anomalies"
        return f"{self.acknowledged} acknowledged, {self.read} read back: {found}"


def _sequence(value: str) -> tuple[str, int] | None:
    """A verifiable producer's value "P.N" or "N" as (prefix, N)."""
    prefix, _, number = value.rpartition(".")
    return (prefix, int(number)) if number.isdigit() else None


def _reads(consumers: Mapping[str, list[Event]], topic: str) -> Iterable[tuple[str, Event]]:
    for name, events in consumers.items():
        for event in events:
            if event.get("name") == "record_data" and event.get("topic") == topic:
                yield name, event


def check(history: History) -> Report:
    report = Report()
    attempted: set[str] = set()
    acked: dict[str, Position] = {}
    for name, events in history.producers.items():
        if not any(e.get("name") == "shutdown_complete" for e in events):
            report.anomalies.append(Anomaly("incomplete", f"producer {name}: no shutdown"))
        for e in events:
            if e.get("name") in ("producer_send_success", "producer_send_error"):
                attempted.add(str(e["value"]))
            if e.get("name") == "producer_send_success":
                acked[str(e["value"])] = (int(e["partition"]), int(e["offset"]))
    report.attempted, report.acknowledged, report.read = len(attempted), len(acked), 0
    final_at: dict[Position, str] = {}
    final_where: dict[str, list[Position]] = defaultdict(list)
    for r in history.final:
        final_at[(r.partition, r.offset)] = r.value
        final_where[r.value].append((r.partition, r.offset))
    report.read = len(history.final)
    _lost_and_duplicates(report, acked, final_where)
    _divergence(report, history, acked, final_at)
    _reorders(report, history.producers, final_where)
    for name, events in history.consumers.items():
        _consumer_order(report, name, events, history.topic, final_at)
    _commits(report, history)
    seen = set(final_where) | {str(e["value"]) for _, e in _reads(history.consumers, history.topic)}
    sent = attempted | {v for t in history.transactions for v in t.values}
    for value in sorted(seen - sent):
        report.anomalies.append(Anomaly("unexpected", f"value {value} was never sent"))
    _transactions(report, history, seen, final_where)
    return report


def _lost_and_duplicates(
    report: Report, acked: Mapping[str, Position], final_where: Mapping[str, Sequence[Position]]
) -> None:
    for value, at in sorted(acked.items(), key=lambda item: item[1]):
        if value not in final_where:
            report.anomalies.append(Anomaly("lost", f"value {value} acked at {at}, not stored"))
    for value, where in sorted(final_where.items()):
        if len(where) > 1:
            report.anomalies.append(Anomaly("duplicate", f"value {value} stored at {where}"))


def _divergence(
    report: Report, history: History, acked: Mapping[str, Position], final_at: dict[Position, str]
) -> None:
    claims: dict[Position, dict[str, str]] = defaultdict(dict)  # position -> value -> by whom
    for value, at in acked.items():
        if at[1] >= 0:  # -1: acknowledged at an unknown offset (a duplicate's answer)
            claims[at].setdefault(value, "ack")
    for name, e in _reads(history.consumers, history.topic):
        claims[(int(e["partition"]), int(e["offset"]))].setdefault(str(e["value"]), name)
    for at, value in final_at.items():
        claims[at].setdefault(value, "final read")
    for at, values in sorted(claims.items()):
        if len(values) > 1:
            said = ", ".join(f"{v} ({who})" for v, who in sorted(values.items()))
            report.anomalies.append(Anomaly("divergent", f"{at} held {said}"))


def _reorders(
    report: Report,
    producers: Mapping[str, list[Event]],
    final_where: Mapping[str, Sequence[Position]],
) -> None:
    for name, events in producers.items():
        by_partition: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
        for e in events:
            if e.get("name") != "producer_send_success":
                continue
            seq = _sequence(str(e["value"]))
            where = final_where.get(str(e["value"]))
            if seq is None or not where:
                continue
            partition, offset = where[0]
            by_partition[partition].append((seq[1], offset, str(e["value"])))
        for partition, sends in sorted(by_partition.items()):
            sends.sort()
            for (_, o1, v1), (_, o2, v2) in pairwise(sends):
                if o2 < o1:
                    detail = f"producer {name}: {v1} at {partition}/{o1} but {v2} at {o2}"
                    report.anomalies.append(Anomaly("reordered", detail))


def _consumer_order(
    report: Report, name: str, events: Sequence[Event], topic: str, final_at: dict[Position, str]
) -> None:
    last: dict[int, int] = {}
    for e in events:
        kind = e.get("name")
        if kind in ("partitions_assigned", "partitions_revoked"):
            for tp in e.get("partitions", []):
                if tp["topic"] == topic:
                    last.pop(int(tp["partition"]), None)
        elif kind == "record_data" and e.get("topic") == topic:
            partition, offset = int(e["partition"]), int(e["offset"])
            before = last.get(partition)
            if before is not None and offset <= before:
                detail = f"consumer {name}: partition {partition} offset {offset} after {before}"
                report.anomalies.append(Anomaly("nonmonotonic_poll", detail))
            elif before is not None and any(
                (partition, o) in final_at for o in range(before + 1, offset)
            ):
                detail = f"consumer {name}: partition {partition} jumped {before} -> {offset}"
                report.anomalies.append(Anomaly("poll_skip", detail))
            last[partition] = max(offset, before if before is not None else offset)


def _commits(report: Report, history: History) -> None:
    """Real-time order only: commit B below commit A is reported when B was sent (bounded
    below by the consumer's event before B's answer) after A's success was seen."""
    commits: list[tuple[int, int, str, str, int, int]] = []
    # (sent at least at, answered at, group, consumer, partition, offset)
    for name, events in history.consumers.items():
        group = history.groups.get(name, "")
        sent = -1  # no earlier event: sent at an unknown time, never provably late
        for e in events:
            if e.get("name") == "offsets_committed" and e.get("success"):
                for o in e.get("offsets", []):
                    if o["topic"] == history.topic:
                        commits.append(
                            (
                                sent,
                                int(e["timestamp"]),
                                group,
                                name,
                                int(o["partition"]),
                                int(o["offset"]),
                            )
                        )
            sent = int(e["timestamp"])
    by_answer = sorted(commits, key=lambda c: c[1])
    highest: dict[tuple[str, int], tuple[int, int, str]] = {}  # (offset, answered at, by)
    done = 0
    for sent, _, group, name, partition, offset in sorted(commits):
        while done < len(by_answer) and by_answer[done][1] < sent:
            _, answered, g, by, p, o = by_answer[done]
            if (g, p) not in highest or o >= highest[(g, p)][0]:
                highest[(g, p)] = (o, answered, by)
            done += 1
        best = highest.get((group, partition))
        if best is not None and offset < best[0]:
            detail = (
                f"group {group!r} partition {partition}: {name} committed {offset}, sent at "
                f"{sent} or later, after {best[2]}'s commit of {best[0]} succeeded at {best[1]}"
            )
            report.anomalies.append(Anomaly("commit_backwards", detail))


def _transactions(
    report: Report, history: History, seen: set[str], final_where: Mapping[str, Sequence[Position]]
) -> None:
    for i, txn in enumerate(history.transactions):
        if not txn.committed:
            for value in txn.values:
                if value in seen:
                    detail = f"transaction {i} aborted, yet {value} was read"
                    report.anomalies.append(Anomaly("aborted_read", detail))
            continue
        stored = [v for v in txn.values if v in final_where]
        if stored and len(stored) != len(txn.values):
            missing = sorted(set(txn.values) - set(stored))
            detail = f"transaction {i} committed, stored {len(stored)}, missing {missing}"
            report.anomalies.append(Anomaly("non_atomic", detail))
