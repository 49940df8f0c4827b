"""A Produce partition's record set passes `_record_set`'s one-unpack check only when the
step-by-step check (`_record_set_checked`: Kafka's `ProduceRequest.validateRecords`) passes
it too; anything else is answered by the step-by-step check, with its code."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from riverlog.protocol.error_codes import KafkaError
from riverlog.protocol.records import compression
from riverlog.server.handlers.produce import _record_set, _record_set_checked
from tests.protocol import crafted


def _outcome(check: object, records: bytes, version: int) -> object:
    try:
        return bytes(check(memoryview(records), version))  # type: ignore[operator]
    except KafkaError as e:
        return (e.error, e.message)


@settings(max_examples=300, deadline=None)
@given(
    codec=st.sampled_from([compression.NONE, compression.ZSTD]),
    flips=st.lists(st.tuples(st.integers(0, 70), st.integers(0, 255)), max_size=3),
    cut=st.integers(-8, 8),
    version=st.integers(3, 9),
)
def test_the_quick_check_agrees_with_the_step_by_step_one(
    codec: int, flips: list[tuple[int, int]], cut: int, version: int
) -> None:
    data = bytearray(crafted.good(2, codec=codec))
    for at, value in flips:
        if at < len(data):
            data[at] = value
    records = bytes(data[:cut] if cut < 0 else data + bytes(cut))
    assert _outcome(_record_set, records, version) == _outcome(
        _record_set_checked, records, version
    )
