"""The pure half of `riverlog consumer-groups`: Kafka's table layouts, reset planning, and
the time formats of `--to-datetime` and `--by-duration`.

Tables follow kafka-consumer-groups.sh (ConsumerGroupCommand): left-aligned columns, each
as wide as its widest cell but at least Kafka's minimum for it, one space apart.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass

from riverlog.cli.java_order import hash_map_order, topic_partition_hash
from riverlog.model import TopicPartition

MISSING = "-"


def table(header: Sequence[str], rows: Sequence[Sequence[object]], minimum: Sequence[int]) -> str:
    """Rows under a header, columns padded to max(minimum, widest cell); the last column is
    not padded."""
    cells = [[str(c) for c in row] for row in [header, *rows]]
    widths = [max(minimum[i], *(len(r[i]) for r in cells)) for i in range(len(header))]
    lines = []
    for row in cells:
        padded = [c.ljust(widths[i]) for i, c in enumerate(row[:-1])]
        lines.append(" ".join([*padded, row[-1]]))
    return "\n".join(lines)


@dataclass(frozen=True)
class OffsetRow:
    """One line of `--describe --offsets`."""

    group: str
    topic: str
    partition: int
    current: int | None
    log_end: int | None
    consumer_id: str = MISSING
    host: str = MISSING
    client_id: str = MISSING

    @property
    def lag(self) -> int | None:
        if self.current is None or self.log_end is None:
            return None
        return max(0, self.log_end - self.current)


def _or_missing(value: int | None) -> str:
    return MISSING if value is None else str(value)


def offsets_table(rows: list[OffsetRow]) -> str:
    header = [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]
    body = [
        [
            r.group,
            r.topic,
            r.partition,
            _or_missing(r.current),
            _or_missing(r.log_end),
            _or_missing(r.lag),
            r.consumer_id,
            r.host,
            r.client_id,
        ]
        for r in sorted(rows, key=lambda r: (r.topic, r.partition))
    ]
    return table(header, body, [15, 15, 10, 15, 15, 15, 15, 15, 0])


def reset_table(group: str, plan: dict[TopicPartition, int]) -> str:
    rows = [[group, t, p, offset] for (t, p), offset in sorted(plan.items())]
    return table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows, [30, 30, 10, 15])


def assignment_text(assignment: dict[str, list[int]]) -> str:
    """`topic(0,1),other(2)` as Kafka's --members --verbose prints it; "-" when empty."""
    if not assignment:
        return MISSING
    return ",".join(f"{t}({','.join(map(str, ps))})" for t, ps in sorted(assignment.items()))


# --- reset planning ---------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """One of the --to-*/--shift-by/--by-duration choices: `kind` and its argument."""

    kind: str  # earliest, latest, current, offset, shift, timestamp, file
    value: int = 0


def plan_reset(
    scenario: Scenario,
    partitions: list[TopicPartition],
    committed: dict[TopicPartition, int],
    earliest: dict[TopicPartition, int],
    latest: dict[TopicPartition, int],
    by_time: dict[TopicPartition, int] | None = None,
) -> dict[TopicPartition, int]:
    """The new offset of each partition, clamped into [earliest, latest] as Kafka does.
    Without a committed offset, --to-current means the log end (as in Kafka's tool) and
    --shift-by is refused."""
    plan = {}
    for tp in partitions:
        low, high = earliest[tp], latest[tp]
        kind = scenario.kind
        if kind == "earliest":
            target = low
        elif kind == "latest":
            target = high
        elif kind == "current":
            target = committed.get(tp, high)
        elif kind == "offset":
            target = scenario.value
        elif kind == "shift":
            if tp not in committed:
                raise ValueError(
                    f"Cannot shift offset for partition {tp[0]}-{tp[1]} since there is no "
                    "current committed offset"
                )
            target = committed[tp] + scenario.value
        elif kind == "timestamp":
            found = (by_time or {}).get(tp, -1)
            target = high if found < 0 else found
        elif kind == "file":  # --from-file: `by_time` holds the file's offsets
            target = (by_time or {})[tp]
        else:
            raise ValueError(f"unknown reset scenario {kind!r}")
        plan[tp] = min(max(target, low), high)
    return plan


def export_csv(group: str, plan: dict[TopicPartition, int], single_group: bool) -> str:
    """`--export`: Kafka's CSV lines (topic,partition,offset, or group first when several
    groups are reset), in the order Kafka's HashMap gives them."""
    order = hash_map_order(plan, lambda tp: topic_partition_hash(*tp))
    prefix = "" if single_group else f"{group},"
    return "".join(f"{prefix}{t},{p},{plan[(t, p)]}\n" for t, p in order)


def parse_reset_csv(text: str, groups: list[str]) -> dict[str, dict[TopicPartition, int]]:
    """`--from-file`: a CSV written by `--export`: with one --group and three columns, that
    group's offsets; otherwise group,topic,partition,offset."""
    rows = [line.split(",") for line in text.split("\n") if line.strip()]
    out: dict[str, dict[TopicPartition, int]] = {}
    try:
        for row in rows:
            if len(groups) == 1 and len(rows[0]) == 3:
                group, (topic, partition, offset) = groups[0], row
            else:
                group, topic, partition, offset = row
            out.setdefault(group, {})[(topic, int(partition))] = int(offset)
    except ValueError:
        raise ValueError(f"Invalid reset plan CSV line: {','.join(row)}") from None
    return out


# --- time formats -------------------------------------------------------------------------

_DATETIME = re.compile(
    r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,3})?)(Z|[+-]\d{2}:?\d{2})?$"
)
_DURATION = re.compile(
    r"^([-+]?)P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$", re.IGNORECASE
)


def parse_datetime(text: str) -> int:
    """`YYYY-MM-DDTHH:mm:SS.sss` with an optional `Z` or `±hh:mm` (local time without one),
    as epoch milliseconds."""
    found = _DATETIME.match(text.strip())
    if found is None:
        raise ValueError(
            f"Error parsing timestamp '{text}': expected YYYY-MM-DDTHH:mm:SS.sss[Z|+hh:mm]"
        )
    moment = dt.datetime.fromisoformat(found.group(1))
    zone = found.group(2)
    if zone is None:
        moment = moment.astimezone()  # naive: the local time zone, as Kafka's tool does
    else:
        moment = moment.replace(tzinfo=dt.UTC if zone == "Z" else _offset_zone(zone))
    return int(moment.timestamp() * 1000)


def _offset_zone(zone: str) -> dt.tzinfo:
    sign = -1 if zone[0] == "-" else 1
    digits = zone[1:].replace(":", "")
    return dt.timezone(sign * dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))


def parse_duration(text: str) -> int:
    """An ISO-8601 duration `PnDTnHnMnS` in milliseconds."""
    found = _DURATION.match(text.strip())
    if found is None or text.strip().upper().endswith(("P", "T")):
        raise ValueError(f"Error parsing duration '{text}': expected PnDTnHnMnS")
    sign, days, hours, minutes, seconds = found.groups()
    total = dt.timedelta(
        days=int(days or 0),
        hours=int(hours or 0),
        minutes=int(minutes or 0),
        seconds=float(seconds or 0),
    )
    millis = int(total.total_seconds() * 1000)
    return -millis if sign == "-" else millis
