"""Replication throttling: which replicas a topic's list names, and the token bucket that
holds throttled traffic to its rate on average."""

from __future__ import annotations

import pytest

from riverlog.server.replication.throttle import UNLIMITED, ReplicationQuota, throttled


def test_throttled_replica_lists_name_partition_broker_pairs_or_everything() -> None:
    assert throttled("0:101, 1:102", 1, 102)
    assert not throttled("0:101,1:102", 1, 101)
    assert not throttled("10:1", 0, 1)  # whole pairs only
    assert throttled("*", 7, 3)
    assert not throttled("", 0, 1)


def test_debt_holds_traffic_until_the_rate_has_paid_it() -> None:
    quota = ReplicationQuota(1000)
    assert not quota.exceeded(0.0)
    quota.record(3000, 0.0)  # one second's burst, then 2000 bytes of debt
    assert quota.exceeded(0.5)
    assert quota.delay_s(1.0) == pytest.approx(1.0)
    assert not quota.exceeded(2.01)


@pytest.mark.parametrize("chunk", [100, 4000])
def test_throttled_traffic_averages_the_rate(chunk: int) -> None:
    quota = ReplicationQuota(10_000)
    sent, now = 0, 0.0
    while now < 20.0:
        if not quota.exceeded(now):
            quota.record(chunk, now)
            sent += chunk
        now += 0.01
    assert 20 * 10_000 <= sent <= 21 * 10_000 + chunk  # the rate plus one second's burst


def test_unlimited_never_throttles() -> None:
    quota = ReplicationQuota(UNLIMITED)
    quota.record(10**12, 0.0)
    assert not quota.limited and not quota.exceeded(0.0) and quota.delay_s(0.0) == 0.0
