"""`riverlog reassign-partitions`' formats and plans, without a cluster: Kafka's JSON in and
out, the checks Kafka's tool makes, balanced proposals, throttled replica lists."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from riverlog.cli.reassign_partitions import (
    ReassignError,
    parse_broker_list,
    parse_plan,
    parse_topics_to_move,
    plan_json,
    propose,
    throttle_configs,
)


def test_plans_read_and_write_kafkas_json() -> None:
    text = (
        '{"version":1,"partitions":[{"topic":"t","partition":1,"replicas":[5,6],'
        '"log_dirs":["any","any"]},{"topic":"t","partition":0,"replicas":[4,5]}]}'
    )
    plan = parse_plan(json.loads(text))
    assert plan == {("t", 1): [5, 6], ("t", 0): [4, 5]}
    assert plan_json(plan) == (
        '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[4,5],'
        '"log_dirs":["any","any"]},{"topic":"t","partition":1,"replicas":[5,6],'
        '"log_dirs":["any","any"]}]}'
    )
    assert parse_plan(json.loads(plan_json(plan))) == plan


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"version": 1, "partitions": []}, "cannot be empty"),
        ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}] * 2}, "duplicate topic"),
        ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]}, "duplicate entries"),
        ({"partitions": [{"topic": "t", "partition": 0, "replicas": []}]}, "cannot be empty"),
        (
            {
                "partitions": [
                    {"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["/data"]}
                ]
            },
            "log directories",
        ),
        ({"partitions": [{"topic": "t"}]}, "expected"),
        ([1, 2], "expected"),
    ],
)
def test_bad_plans_are_refused_with_kafkas_messages(raw: object, message: str) -> None:
    with pytest.raises(ReassignError, match=message):
        parse_plan(raw)


def test_topics_to_move_and_broker_lists() -> None:
    assert parse_topics_to_move({"version": 1, "topics": [{"topic": "a"}, {"topic": "b"}]}) == [
        "a",
        "b",
    ]
    with pytest.raises(ReassignError, match="duplicate"):
        parse_topics_to_move({"topics": [{"topic": "a"}, {"topic": "a"}]})
    with pytest.raises(ReassignError, match="no topics"):
        parse_topics_to_move({"topics": []})
    assert parse_broker_list("4,5,6") == [4, 5, 6]
    for bad in ("4,x", "4,4", None):
        with pytest.raises(ReassignError):
            parse_broker_list(bad)


def test_proposals_keep_counts_and_balance_leaders_and_replicas() -> None:
    current = {("t", p): [1, 2, 3] for p in range(6)} | {("u", 0): [1, 2]}
    proposed = propose(current, dict.fromkeys([4, 5, 6]), random.Random(7))
    assert set(proposed) == set(current)
    assert all(len(proposed[tp]) == len(current[tp]) for tp in current)
    assert all(set(r) <= {4, 5, 6} and len(set(r)) == len(r) for r in proposed.values())
    leaders = Counter(proposed[("t", p)][0] for p in range(6))
    assert sorted(leaders.values()) == [2, 2, 2]
    with pytest.raises(ReassignError, match="larger than available brokers"):
        propose({("t", 0): [1, 2, 3]}, dict.fromkeys([4, 5]), random.Random(1))


def test_throttles_name_current_replicas_as_leaders_and_new_ones_as_followers() -> None:
    current = {("t", 0): [1, 2], ("t", 1): [2, 3], ("u", 0): [1]}
    plan = {("t", 0): [2, 4], ("t", 1): [2, 3], ("u", 0): [1]}
    assert throttle_configs(current, plan) == {
        "t": {
            "leader.replication.throttled.replicas": "0:1,0:2",
            "follower.replication.throttled.replicas": "0:4",
        },
    }
