"""The history checker against doctored histories: a clean one passes, each planted anomaly is
caught and named, and nothing else is reported with it."""

from __future__ import annotations

from typing import Any

import pytest

from riverlog.testing.history import History, Record, Transaction, check

T = "t"


def ack(value: str, partition: int, offset: int) -> dict[str, Any]:
    return {
        "timestamp": 1,
        "name": "producer_send_success",
        "key": None,
        "value": value,
        "topic": T,
        "partition": partition,
        "offset": offset,
    }


def error(value: str) -> dict[str, Any]:
    return {
        "timestamp": 1,
        "name": "producer_send_error",
        "key": None,
        "value": value,
        "topic": T,
        "exception": "class KafkaError",
        "message": "boom",
    }


def read(value: str, partition: int, offset: int) -> dict[str, Any]:
    return {
        "timestamp": 1,
        "name": "record_data",
        "key": None,
        "value": value,
        "topic": T,
        "partition": partition,
        "offset": offset,
    }


def assigned(*partitions: int) -> dict[str, Any]:
    return {
        "timestamp": 1,
        "name": "partitions_assigned",
        "partitions": [{"topic": T, "partition": p} for p in partitions],
    }


def committed(when: int, partition: int, offset: int, success: bool = True) -> dict[str, Any]:
    return {
        "timestamp": when,
        "name": "offsets_committed",
        "success": success,
        "offsets": [{"topic": T, "partition": partition, "offset": offset}],
    }


def consumed(when: int, partition: int, first: int, last: int) -> dict[str, Any]:
    """The tool's line before each commit: the commit is sent right after it."""
    return {
        "timestamp": when,
        "name": "records_consumed",
        "count": last - first + 1,
        "partitions": [
            {
                "topic": T,
                "partition": partition,
                "count": last - first + 1,
                "minOffset": first,
                "maxOffset": last,
            }
        ],
    }


DONE = {"timestamp": 2, "name": "shutdown_complete"}


def clean() -> History:
    """Producer p sent 0..5 to partitions 0 (even) and 1 (odd); consumer c read them all and
    committed; the final read holds each once."""
    sends = [ack(f"1.{i}", i % 2, i // 2) for i in range(6)]
    reads = [assigned(0, 1)] + [read(f"1.{i}", i % 2, i // 2) for i in range(6)]
    reads += [committed(5, 0, 3), committed(5, 1, 3)]
    final = [Record(i % 2, i // 2, f"1.{i}") for i in range(6)]
    return History(T, {"p": [*sends, DONE]}, {"c": reads}, final=final)


def kinds(history: History) -> dict[str, int]:
    return {k: n for k, n in check(history).counts().items() if n}


def test_a_clean_history_has_no_anomalies() -> None:
    report = check(clean())
    assert report.ok, report.anomalies
    assert (report.acknowledged, report.read) == (6, 6)
    assert check(History(T)).ok


def test_acked_but_missing_is_lost() -> None:
    h = clean()
    h.final = [r for r in h.final if r.value != "1.4"]
    assert kinds(h) == {"lost": 1}
    assert "1.4" in check(h).of("lost")[0].detail


def test_a_failed_send_may_or_may_not_be_stored() -> None:
    h = clean()
    h.producers["p"].insert(0, error("1.9"))
    assert check(h).ok  # not stored: fine
    h.final.append(Record(0, 3, "1.9"))
    assert check(h).ok  # stored anyway (the ack was lost): fine too


def test_a_value_stored_twice_is_a_duplicate() -> None:
    h = clean()
    h.final.append(Record(1, 3, "1.3"))
    assert kinds(h) == {"duplicate": 1}


def test_one_offset_holding_two_values_is_divergent() -> None:
    h = clean()
    h.consumers["c"].insert(3, read("1.8", 0, 1))  # a reader saw 1.8 where 1.2 now is
    h.producers["p"].append(error("1.8"))
    found = kinds(h)
    assert found.pop("divergent") == 1
    assert set(found) <= {"nonmonotonic_poll"}


def test_out_of_send_order_is_reordered() -> None:
    h = clean()
    swapped = {"1.0": 1, "1.2": 0}  # 1.2 stored before 1.0, both in partition 0
    h.producers["p"] = [
        ack(str(e["value"]), 0, swapped[str(e["value"])]) if e.get("value") in swapped else e
        for e in h.producers["p"]
    ]
    h.final = [Record(0, swapped[r.value], r.value) if r.value in swapped else r for r in h.final]
    h.consumers["c"] = [assigned(0, 1)]
    assert kinds(h) == {"reordered": 1}


def test_an_offset_handed_out_again_is_a_nonmonotonic_poll() -> None:
    h = clean()
    h.consumers["c"].insert(4, read("1.0", 0, 0))  # after offset 1 of partition 0
    assert kinds(h) == {"nonmonotonic_poll": 1}


def test_a_reassignment_allows_reading_again() -> None:
    h = clean()
    h.consumers["c"] += [assigned(0), read("1.0", 0, 0)]
    assert check(h).ok


def test_jumping_over_stored_offsets_is_a_poll_skip() -> None:
    h = clean()
    h.consumers["c"] = [e for e in h.consumers["c"] if e != read("1.2", 0, 1)]
    assert kinds(h) == {"poll_skip": 1}


def test_a_group_commit_going_down_is_commit_backwards() -> None:
    h = clean()
    h.consumers["d"] = [consumed(7, 0, 0, 0), committed(9, 0, 1)]
    h.groups = {"c": "g", "d": "g"}
    assert kinds(h) == {"commit_backwards": 1}
    h.consumers["d"] = [consumed(7, 0, 0, 0), committed(9, 0, 1, success=False)]
    assert check(h).ok
    h.consumers["d"] = [consumed(7, 0, 0, 0), committed(9, 0, 1)]
    h.groups = {"c": "g", "d": "other group"}
    assert check(h).ok


def test_a_lower_commit_answered_late_is_not_commit_backwards() -> None:
    """Finding 13 (seed 1609): c2 sent its commit of 96867 at 763023, the coordinator took it
    (c1, assigned partition 0 at 774521, started there), and the answer reached c2 only at
    776487, after c1's commits up to 98581 — a commit's effect lies anywhere between its send
    and its answer, so this proves nothing. Sent after c1's success, the same commit would."""
    h = clean()
    h.consumers["c2"] = [consumed(763023, 0, 96866, 96866), committed(776487, 0, 96867)]
    h.consumers["c1"] = [
        assigned(0, 1, 2),
        consumed(774569, 0, 96867, 97174),
        committed(774572, 0, 97175),
        consumed(776210, 0, 98575, 98580),
        committed(776225, 0, 98581),
    ]
    h.groups = {"c1": "g", "c2": "g"}
    assert check(h).ok, check(h).anomalies
    h.consumers["c2"] = [consumed(776300, 0, 96866, 96866), committed(776487, 0, 96867)]
    [found] = check(h).of("commit_backwards")
    assert "c2 committed 96867" in found.detail and "98581" in found.detail
    h.consumers["c2"] = [consumed(774572, 0, 96866, 96866), committed(776487, 0, 96867)]
    assert check(h).ok  # sent in the millisecond c1's first commit was answered: not after it


@pytest.mark.parametrize("where", ["final", "consumer"])
def test_a_value_never_sent_is_unexpected(where: str) -> None:
    h = clean()
    if where == "final":
        h.final.append(Record(0, 3, "1.77"))
    else:
        h.consumers["c"].append(read("1.77", 0, 3))
        h.final.append(Record(0, 3, "1.77"))
    assert kinds(h) == {"unexpected": 1}


def test_a_producer_without_shutdown_is_incomplete() -> None:
    h = clean()
    h.producers["p"].remove(DONE)
    assert kinds(h) == {"incomplete": 1}


def test_aborted_reads_and_non_atomic_transactions() -> None:
    h = clean()
    h.transactions = [Transaction(("1.0", "1.1"), committed=True)]
    assert check(h).ok
    h.transactions = [Transaction(("1.0", "1.1", "1.50"), committed=True)]
    assert kinds(h) == {"non_atomic": 1}
    h.transactions = [Transaction(("1.2",), committed=False)]
    assert kinds(h) == {"aborted_read": 1}
    h.transactions = [Transaction(("1.60", "1.61"), committed=False)]
    assert check(h).ok  # aborted and never read
