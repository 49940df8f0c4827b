"""The idempotent producer's answer rules (`client/sequencing.judge`), as a table: pure, no
I/O. The producer-level tests in test_client_logic.py drive the same rules through
`AsyncProducer`."""

from __future__ import annotations

import pytest

from riverlog.client.accumulator import RecordAccumulator
from riverlog.client.sequencing import PartitionState, Verdict, judge
from riverlog.protocol import error_codes

OOO = error_codes.OUT_OF_ORDER_SEQUENCE_NUMBER.code
UNKNOWN_PID = error_codes.UNKNOWN_PRODUCER_ID.code
NOT_LEADER = error_codes.NOT_LEADER_OR_FOLLOWER.code
TOO_LARGE = error_codes.MESSAGE_TOO_LARGE.code
DUPLICATE = error_codes.DUPLICATE_SEQUENCE_NUMBER.code


def _batches(n: int, producer_id: int = 7):
    acc = RecordAccumulator(16384, 0)
    out = []
    for _ in range(n):
        acc.append("t", 0, 1, None, b"x", (), now_ms=0)
        batch = acc.pop(("t", 0))
        batch.producer_id, batch.attempts = producer_id, 1
        out.append(batch)
    return out


@pytest.mark.parametrize(
    ("code", "verdict", "offset_known", "renews", "refresh"),
    [
        (0, Verdict.DONE, True, False, False),
        (DUPLICATE, Verdict.DONE, False, False, False),
        (NOT_LEADER, Verdict.RETRY, None, False, True),
        (OOO, Verdict.RETRY, None, True, False),  # nothing earlier unsettled: a real gap
        (UNKNOWN_PID, Verdict.RETRY, None, True, True),
        (TOO_LARGE, Verdict.FAIL, None, True, False),  # idempotent: the gap needs a new id
    ],
)
def test_an_answer_to_a_lone_batch(code, verdict, offset_known, renews, refresh) -> None:
    (batch,) = _batches(1)
    state = PartitionState(sending=[batch])
    j = judge(state, batch, code, None, producer_id=7, idempotent=True, retries=5)
    assert j.verdict is verdict
    assert state.sending == []
    assert (j.renew_because is not None) == renews
    assert j.refresh_metadata == refresh
    if offset_known is not None:
        assert j.offset_known == offset_known and j.error is None
    else:
        assert j.error is not None and j.error.code == code
    assert state.acked == (verdict is Verdict.DONE)


def test_out_of_order_behind_an_unanswered_batch_is_retried_under_the_same_id() -> None:
    first, second = _batches(2)
    state = PartitionState(sending=[first, second])
    j = judge(state, second, OOO, None, producer_id=7, idempotent=True, retries=5)
    assert (j.verdict, j.renew_because) == (Verdict.RETRY, None)


def test_out_of_order_after_a_later_acknowledged_batch_is_in_the_log() -> None:
    first, second = _batches(2)
    state = PartitionState(sending=[first, second])
    judge(state, second, 0, None, producer_id=7, idempotent=True, retries=5)
    j = judge(state, first, OOO, None, producer_id=7, idempotent=True, retries=5)
    assert (j.verdict, j.offset_known, j.answered, j.renew_because) == (
        Verdict.DONE,
        False,
        False,
        None,
    )


def test_an_answer_under_an_old_producer_id_does_not_mark_the_new_one_known() -> None:
    (batch,) = _batches(1, producer_id=6)
    state = PartitionState(sending=[batch])
    j = judge(state, batch, 0, None, producer_id=7, idempotent=True, retries=5)
    assert j.verdict is Verdict.DONE and not state.acked and state.acked_serial == -1


def test_retries_exhausted_fail_and_without_idempotence_keep_the_id() -> None:
    (batch,) = _batches(1)
    batch.attempts = 3
    state = PartitionState(sending=[batch])
    j = judge(state, batch, NOT_LEADER, "moved", producer_id=7, idempotent=False, retries=2)
    assert (j.verdict, j.renew_because) == (Verdict.FAIL, None)
    assert j.error is not None and "moved" in str(j.error)
