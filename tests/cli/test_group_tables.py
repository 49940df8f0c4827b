"""The pure half of `riverlog consumer-groups`: tables, reset plans, time formats."""

from __future__ import annotations

import datetime as dt

import pytest

from riverlog.cli.group_tables import (
    OffsetRow,
    Scenario,
    assignment_text,
    offsets_table,
    parse_datetime,
    parse_duration,
    plan_reset,
    reset_table,
    table,
)


def test_columns_are_as_wide_as_their_widest_cell_or_kafkas_minimum() -> None:
    text = table(
        ["A", "BB", "LAST"], [["x" * 20, "y", "z"], ["q", "r", "long last cell"]], [5, 5, 0]
    )
    assert text.splitlines() == [
        "A                    BB    LAST",
        "xxxxxxxxxxxxxxxxxxxx y     z",
        "q                    r     long last cell",
    ]


def test_offsets_table_shows_lag_and_dashes_for_unknowns_sorted_by_partition() -> None:
    rows = [
        OffsetRow("g", "t", 1, None, 7),
        OffsetRow("g", "t", 0, 3, 10, "member-1", "/127.0.0.1", "client"),
    ]
    lines = offsets_table(rows).splitlines()
    assert lines[0].split() == [
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
    assert lines[1].split() == ["g", "t", "0", "3", "10", "7", "member-1", "/127.0.0.1", "client"]
    assert lines[2].split() == ["g", "t", "1", "-", "7", "-", "-", "-", "-"]
    assert lines[0].index("PARTITION") == 32  # GROUP and TOPIC are at least 15 wide


def test_reset_table_and_assignment_text() -> None:
    assert reset_table("g", {("t", 1): 5, ("t", 0): 2}).splitlines()[1:] == [
        "g" + " " * 30 + "t" + " " * 30 + "0" + " " * 10 + "2",
        "g" + " " * 30 + "t" + " " * 30 + "1" + " " * 10 + "5",
    ]
    assert assignment_text({"b": [2], "a": [0, 1]}) == "a(0,1),b(2)"
    assert assignment_text({}) == "-"


TPS = [("t", 0), ("t", 1)]
EARLIEST = {("t", 0): 10, ("t", 1): 0}
LATEST = {("t", 0): 100, ("t", 1): 50}
COMMITTED = {("t", 0): 40}


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        (Scenario("earliest"), {("t", 0): 10, ("t", 1): 0}),
        (Scenario("latest"), {("t", 0): 100, ("t", 1): 50}),
        (Scenario("current"), {("t", 0): 40, ("t", 1): 50}),
        (Scenario("offset", 70), {("t", 0): 70, ("t", 1): 50}),
        (Scenario("offset", 1), {("t", 0): 10, ("t", 1): 1}),
    ],
)
def test_reset_plans_are_clamped_to_the_log(
    scenario: Scenario, expected: dict[tuple[str, int], int]
) -> None:
    assert plan_reset(scenario, TPS, COMMITTED, EARLIEST, LATEST) == expected


def test_shift_by_moves_from_the_commit_and_needs_one() -> None:
    assert plan_reset(Scenario("shift", -35), [("t", 0)], COMMITTED, EARLIEST, LATEST) == {
        ("t", 0): 10
    }
    assert plan_reset(Scenario("shift", 5), [("t", 0)], COMMITTED, EARLIEST, LATEST) == {
        ("t", 0): 45
    }
    with pytest.raises(ValueError, match="no current committed offset"):
        plan_reset(Scenario("shift", 1), TPS, COMMITTED, EARLIEST, LATEST)


def test_reset_by_time_uses_the_log_end_where_no_record_is_that_new() -> None:
    by_time = {("t", 0): 20, ("t", 1): -1}
    assert plan_reset(Scenario("timestamp", 123), TPS, {}, EARLIEST, LATEST, by_time) == {
        ("t", 0): 20,
        ("t", 1): 50,
    }


def test_datetimes_with_and_without_zones() -> None:
    assert parse_datetime("2024-03-01T12:00:00.000Z") == 1709294400000
    assert parse_datetime("2024-03-01T12:00:00.250+02:00") == 1709294400000 - 7_200_000 + 250
    assert parse_datetime("2024-03-01T12:00:00-0130") == 1709294400000 + 5_400_000
    local = dt.datetime(2024, 3, 1, 12, 0, 0).astimezone()
    assert parse_datetime("2024-03-01T12:00:00.000") == int(local.timestamp() * 1000)
    with pytest.raises(ValueError, match="Error parsing timestamp"):
        parse_datetime("yesterday")


def test_iso_durations() -> None:
    assert parse_duration("PT1H") == 3_600_000
    assert parse_duration("P1DT2H3M4.5S") == 93_784_500
    assert parse_duration("PT0.5S") == 500
    assert parse_duration("-PT1M") == -60_000
    for bad in ("P", "PT", "1H", "PT1X"):
        with pytest.raises(ValueError, match="Error parsing duration"):
            parse_duration(bad)
