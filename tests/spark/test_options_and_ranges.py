"""The connector's pure parts: option parsing (Spark's names and rules) and range planning."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from riverlog.spark.options import (
    OffsetSpec,
    offsets_from_json,
    offsets_json,
    parse_sink,
    parse_source,
)
from riverlog.spark.ranges import OffsetRange, ranges_between, rate_limit, split_ranges

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_spark_names_arrive_lower_cased_and_map_to_the_client() -> None:
    o = parse_source(
        {
            **BOOT,
            "subscribe": "a, b",
            "startingoffsets": '{"a":{"0":5,"1":-2}}',
            "maxoffsetspertrigger": "100",
            "includeheaders": "TRUE",
            "kafka.fetch.max.bytes": "1000",
        },
        streaming=True,
    )
    assert o.subscription == ("subscribe", ["a", "b"])
    assert o.starting == OffsetSpec("offsets", {("a", 0): 5, ("a", 1): -2})
    assert o.max_offsets_per_trigger == 100 and o.include_headers and o.fail_on_data_loss
    assert o.client == {"bootstrap.servers": "127.0.0.1:9092", "fetch.max.bytes": "1000"}


def test_defaults_differ_for_batch_and_streaming() -> None:
    assert parse_source({**BOOT, "subscribe": "a"}, streaming=True).starting.kind == "latest"
    batch = parse_source({**BOOT, "subscribe": "a"}, streaming=False)
    assert (batch.starting.kind, batch.ending.kind) == ("earliest", "latest")


def test_timestamps_take_precedence_as_in_spark() -> None:
    o = parse_source(
        {
            **BOOT,
            "assign": '{"a":[0]}',
            "startingOffsets": "earliest",
            "startingOffsetsByTimestamp": '{"a":{"0":1000}}',
            "endingTimestamp": "2000",
        },
        streaming=False,
    )
    assert o.starting == OffsetSpec("timestamps", {("a", 0): 1000})
    assert o.ending == OffsetSpec("timestamp", timestamp=2000)
    assert o.subscription == ("assign", [("a", 0)])


def test_plain_bootstrap_servers_is_accepted() -> None:
    o = parse_source({"bootstrap.servers": "h:1", "subscribe": "a"}, streaming=True)
    assert o.client == {"bootstrap.servers": "h:1"}


def test_pattern_is_a_regex() -> None:
    o = parse_source({**BOOT, "subscribePattern": "ev.*"}, streaming=True)
    assert o.subscription[0] == "subscribePattern"
    assert isinstance(o.subscription[1], re.Pattern)


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"subscribe": "a"}, True, "kafka.bootstrap.servers"),
        ({**BOOT}, True, "exactly one of"),
        ({**BOOT, "subscribe": "a", "assign": '{"a":[0]}'}, True, "exactly one of"),
        ({**BOOT, "subscribepattern": "("}, True, "not a regex"),
        ({**BOOT, "assign": "[1]"}, True, "assign"),
        ({**BOOT, "subscribe": "a", "startingoffsets": "{bad"}, True, "startingOffsets"),
        ({**BOOT, "subscribe": "a", "startingoffsets": "latest"}, False, "batch"),
        ({**BOOT, "subscribe": "a", "endingoffsets": "earliest"}, False, "endingOffsets"),
        ({**BOOT, "subscribe": "a", "endingoffsets": "latest"}, True, "batch queries"),
        ({**BOOT, "subscribe": "a", "maxoffsetspertrigger": "10"}, False, "streaming"),
        ({**BOOT, "subscribe": "a", "maxoffsetspertrigger": "0"}, True, "at least 1"),
        ({**BOOT, "subscribe": "a", "minpartitions": "x"}, True, "integer"),
        ({**BOOT, "subscribe": "a", "failondataloss": "maybe"}, True, "true or false"),
        ({**BOOT, "subscribe": "a", "kafka.group.id": "g"}, True, "not supported"),
        ({**BOOT, "subscribe": "a", "kafka.auto.offset.reset": "x"}, True, "startingOffsets"),
        (
            {**BOOT, "assign": '{"a":[0,1]}', "startingoffsets": '{"a":{"0":1}}'},
            True,
            "exactly the partitions",
        ),
    ],
)
def test_bad_options_name_themselves(
    options: dict[str, str], streaming: bool, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_source(options, streaming=streaming)


def test_sink_options() -> None:
    assert parse_sink({**BOOT, "topic": "out"}).topic == "out"
    assert parse_sink(BOOT).topic is None
    with pytest.raises(ValueError, match=r"value\.serializer"):
        parse_sink({**BOOT, "kafka.value.serializer": "x"})


def test_exactly_once_sink_options() -> None:
    assert not parse_sink(BOOT).exactly_once
    o = parse_sink({**BOOT, "deliveryguarantee": "Exactly-Once", "transactionalidprefix": "p-"})
    assert o.exactly_once and o.transactional_id_prefix == "p-"
    with pytest.raises(ValueError, match="deliveryGuarantee"):
        parse_sink({**BOOT, "deliveryguarantee": "exactly_once"})
    with pytest.raises(ValueError, match="for streaming queries"):
        parse_sink({**BOOT, "deliveryguarantee": "exactly-once"}, streaming=False)
    with pytest.raises(ValueError, match=r"kafka\.transactional\.id"):
        parse_sink({**BOOT, "kafka.transactional.id": "mine"})


@given(
    st.dictionaries(st.tuples(st.text(min_size=1), st.integers(0, 99)), st.integers(-2, 1 << 40))
)
def test_checkpoint_offsets_round_trip(offsets: dict[tuple[str, int], int]) -> None:
    assert offsets_from_json(offsets_json(offsets)) == offsets


def test_split_follows_spark_min_partitions_rule() -> None:
    ranges = [OffsetRange("a", 0, 0, 100), OffsetRange("a", 1, 0, 300), OffsetRange("a", 2, 5, 5)]
    assert split_ranges(ranges, None) == ranges[:2]
    assert split_ranges(ranges, 2) == ranges[:2]
    parts = split_ranges(ranges, 8)
    assert [p for p in parts if p.partition == 0] == [
        OffsetRange("a", 0, 0, 50),
        OffsetRange("a", 0, 50, 100),
    ]
    assert [(p.start, p.until) for p in parts if p.partition == 1] == [
        (0, 50),
        (50, 100),
        (100, 150),
        (150, 200),
        (200, 250),
        (250, 300),
    ]


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 5000)), min_size=1, max_size=8),
    st.integers(1, 40),
)
def test_split_ranges_cover_exactly_once(spans: list[tuple[int, int]], wanted: int) -> None:
    ranges = [OffsetRange("t", i, s, s + n) for i, (s, n) in enumerate(spans)]
    parts = split_ranges(ranges, wanted)
    for r in ranges:
        mine = sorted((p.start, p.until) for p in parts if p.partition == r.partition)
        covered = [o for s, u in mine for o in range(s, u)] if r.size < 200 else None
        if covered is not None:
            assert covered == list(range(r.start, r.until))
        if mine:
            assert mine[0][0] == r.start and mine[-1][1] == r.until
            assert all(a[1] == b[0] for a, b in itertools.pairwise(mine))
    if sum(r.size > 0 for r in ranges) and wanted > sum(r.size > 0 for r in ranges):
        assert len(parts) >= min(wanted // 2, sum(r.size for r in ranges))


def test_rate_limit_shares_by_backlog_and_never_starves() -> None:
    start = {("a", 0): 0, ("a", 1): 0, ("a", 2): 10, ("a", 3): 7}
    latest = {("a", 0): 300, ("a", 1): 100, ("a", 2): 11, ("a", 3): 7}
    assert rate_limit(start, latest, 100) == {("a", 0): 74, ("a", 1): 24, ("a", 2): 11, ("a", 3): 7}
    assert rate_limit(start, latest, 10_000) == latest


def test_ranges_between_skips_empty() -> None:
    assert ranges_between({("a", 0): 5, ("a", 1): 3}, {("a", 0): 5, ("a", 1): 9}) == [
        OffsetRange("a", 1, 3, 9)
    ]
