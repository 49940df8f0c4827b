"""The pure part of the leaders' transaction verification (KIP-890 part 1): one queued
verification per transactional id and coordinator broker, the coordinator's answers read
per verification, and the answers producers and TxnOffsetCommit get (Kafka's
AddPartitionsToTxnManager, ReplicaManager and GroupCoordinator)."""

from __future__ import annotations

import asyncio

import pytest

from riverlog.protocol import error_codes as ec
from riverlog.protocol import messages as m
from riverlog.protocol.error_codes import ErrorCode
from riverlog.server.txn_verification import (
    PendingVerifications,
    Verification,
    offset_commit_error,
    outcomes,
    produce_error,
    verify_request,
)

A, B = ("a", 0), ("b", 1)


def verification(loop: asyncio.AbstractEventLoop, tid: str, epoch: int) -> Verification:
    return Verification(tid, 42, epoch, (A, B), loop.create_future())


def test_one_queued_verification_per_transactional_id() -> None:
    loop = asyncio.new_event_loop()
    try:
        pending = PendingVerifications()
        first = verification(loop, "tx", 3)
        assert pending.add(1, first) == []
        assert pending.add(1, verification(loop, "other", 0)) == []
        retry = verification(loop, "tx", 3)  # same epoch: the client retried
        assert pending.add(1, retry) == [(first, dict.fromkeys((A, B), ec.NETWORK_EXCEPTION))]
        bumped = verification(loop, "tx", 4)
        fenced = dict.fromkeys((A, B), ec.INVALID_PRODUCER_EPOCH)
        assert pending.add(1, bumped) == [(retry, fenced)]
        zombie = verification(loop, "tx", 2)  # older than the queued one: refused at once
        assert pending.add(1, zombie) == [(zombie, fenced)]
        assert pending.add(2, verification(loop, "tx", 1)) == []  # another coordinator
        taken = pending.take(1)
        assert [(v.transactional_id, v.producer_epoch) for v in taken] == [("tx", 4), ("other", 0)]
        assert pending.take(1) == []
        assert len(pending.take_all()) == 1
    finally:
        loop.close()


def _response(**codes: int) -> m.AddPartitionsToTxnResponse:
    R = m.AddPartitionsToTxnResponse
    return R(
        results_by_transaction=[
            R.AddPartitionsToTxnResult(
                transactional_id=tid,
                topic_results=[
                    R.AddPartitionsToTxnTopicResult(
                        name="a",
                        results_by_partition=[
                            R.AddPartitionsToTxnPartitionResult(
                                partition_index=0, partition_error_code=code
                            )
                        ],
                    )
                ],
            )
            for tid, code in codes.items()
        ]
    )


def test_outcomes_read_the_coordinators_answer() -> None:
    loop = asyncio.new_event_loop()
    try:
        ok, fenced, missing = (verification(loop, t, 0) for t in ("ok", "fenced", "missing"))
        request = verify_request([ok, fenced])
        assert [t.verify_only for t in request.transactions] == [True, True]
        assert [(t.name, t.partitions) for t in request.transactions[0].topics] == [
            ("a", [0]),
            ("b", [1]),
        ]
        answered = outcomes(
            [ok, fenced, missing],
            _response(ok=0, fenced=ec.PRODUCER_FENCED.code),
        )
        # B was not answered for anyone: unconfirmed, retriable.
        assert answered == [
            (ok, {B: ec.NETWORK_EXCEPTION}),
            (fenced, {A: ec.INVALID_PRODUCER_EPOCH, B: ec.NETWORK_EXCEPTION}),
            (missing, {A: ec.NETWORK_EXCEPTION, B: ec.NETWORK_EXCEPTION}),
        ]
        denied = m.AddPartitionsToTxnResponse(error_code=ec.CLUSTER_AUTHORIZATION_FAILED.code)
        assert outcomes([ok], denied) == [(ok, {A: ec.INVALID_TXN_STATE, B: ec.INVALID_TXN_STATE})]
    finally:
        loop.close()


@pytest.mark.parametrize(
    ("error", "version", "answered", "message"),
    [
        (ec.TRANSACTION_ABORTABLE, 10, ec.INVALID_TXN_STATE, "not added"),
        (ec.TRANSACTION_ABORTABLE, 11, ec.TRANSACTION_ABORTABLE, None),
        (ec.INVALID_TXN_STATE, 9, ec.INVALID_TXN_STATE, "not added"),
        (ec.NOT_COORDINATOR, 9, ec.NOT_ENOUGH_REPLICAS, "Underlying error: NOT_COORDINATOR"),
        (ec.COORDINATOR_LOAD_IN_PROGRESS, 11, ec.NOT_ENOUGH_REPLICAS, "COORDINATOR_LOAD"),
        (ec.COORDINATOR_NOT_AVAILABLE, 3, ec.NOT_ENOUGH_REPLICAS, "COORDINATOR_NOT_AVAILABLE"),
        (ec.CONCURRENT_TRANSACTIONS, 11, ec.NOT_ENOUGH_REPLICAS, "CONCURRENT_TRANSACTIONS"),
        (ec.NETWORK_EXCEPTION, 7, ec.NOT_ENOUGH_REPLICAS, "NETWORK_EXCEPTION"),
        (ec.INVALID_PRODUCER_EPOCH, 9, ec.INVALID_PRODUCER_EPOCH, None),
        (ec.INVALID_PRODUCER_ID_MAPPING, 9, ec.INVALID_PRODUCER_ID_MAPPING, None),
    ],
)
def test_produce_answers_are_kafkas(
    error: ErrorCode, version: int, answered: ErrorCode, message: str | None
) -> None:
    got = produce_error(error, version)
    assert got.error is answered
    if message is not None:
        assert message in got.message


@pytest.mark.parametrize(
    ("error", "version", "answered"),
    [
        (ec.TRANSACTION_ABORTABLE, 0, ec.INVALID_TXN_STATE),
        (ec.TRANSACTION_ABORTABLE, 4, ec.INVALID_TXN_STATE),
        (ec.TRANSACTION_ABORTABLE, 5, ec.TRANSACTION_ABORTABLE),
        (ec.INVALID_TXN_STATE, 3, ec.INVALID_TXN_STATE),
        (ec.NETWORK_EXCEPTION, 4, ec.COORDINATOR_LOAD_IN_PROGRESS),
        (ec.COORDINATOR_NOT_AVAILABLE, 4, ec.COORDINATOR_NOT_AVAILABLE),
        (ec.NOT_COORDINATOR, 2, ec.NOT_COORDINATOR),
        (ec.CONCURRENT_TRANSACTIONS, 4, ec.CONCURRENT_TRANSACTIONS),
        (ec.INVALID_PRODUCER_EPOCH, 4, ec.INVALID_PRODUCER_EPOCH),
        (ec.INVALID_PRODUCER_ID_MAPPING, 1, ec.INVALID_PRODUCER_ID_MAPPING),
    ],
)
def test_txn_offset_commit_answers_are_kafkas(
    error: ErrorCode, version: int, answered: ErrorCode
) -> None:
    assert offset_commit_error(error, version) is answered
