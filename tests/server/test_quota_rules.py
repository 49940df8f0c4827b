"""Client quotas' pure rules (server/quotas/rules.py): Kafka's entity precedence, the sampled
rate and the throttle it earns, all at given times."""

from __future__ import annotations

import pytest

from riverlog.server.quotas.rules import (
    DEFAULT,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    Entity,
    SampledRate,
    entities_matching,
    parse_value,
    record_and_throttle,
    resolve,
    throttle_ms,
)

P = PRODUCER_BYTE_RATE


def test_entity_paths_round_trip() -> None:
    for entity, path in (
        (Entity(client_id="app"), "clients/app"),
        (Entity(user="alice"), "users/alice"),
        (Entity("alice", DEFAULT), "users/alice/clients/<default>"),
        (Entity(DEFAULT, None), "users/<default>"),
    ):
        assert entity.path == path
        assert Entity.from_path(path) == entity
    for bad in ("topics/t", "users", "users/a/b/c", "clients/"):
        with pytest.raises(ValueError):
            Entity.from_path(bad)


def test_the_most_specific_entity_wins_in_kafkas_order() -> None:
    quotas = {
        Entity(None, DEFAULT): {P: 1.0},
        Entity(None, "app"): {P: 2.0},
        Entity(DEFAULT, None): {P: 3.0},
        Entity(DEFAULT, DEFAULT): {P: 4.0},
        Entity(DEFAULT, "app"): {P: 5.0},
        Entity("alice", None): {P: 6.0},
        Entity("alice", DEFAULT): {P: 7.0},
        Entity("alice", "app"): {P: 8.0},
    }
    order = [
        Entity("alice", "app"),
        Entity("alice", DEFAULT),
        Entity("alice", None),
        Entity(DEFAULT, "app"),
        Entity(DEFAULT, DEFAULT),
        Entity(DEFAULT, None),
        Entity(None, "app"),
        Entity(None, DEFAULT),
    ]
    expected_sensor = [
        ("alice", "app"),
        ("alice", "app"),
        ("alice", ""),
        ("alice", "app"),
        ("alice", "app"),
        ("alice", ""),
        ("", "app"),
        ("", "app"),
    ]
    for entity, sensor in zip(order, expected_sensor, strict=True):
        assert resolve(quotas, P, "alice", "app") == (sensor, quotas[entity][P])
        del quotas[entity]
    assert resolve(quotas, P, "alice", "app") is None


def test_a_named_client_id_is_shared_by_users_a_default_one_is_not() -> None:
    quotas = {Entity(None, "app"): {P: 10.0}, Entity(None, DEFAULT): {P: 20.0}}
    assert resolve(quotas, P, "alice", "app") == (("", "app"), 10.0)
    assert resolve(quotas, P, "bob", "app") == (("", "app"), 10.0)
    assert resolve(quotas, P, "bob", "other") == (("", "other"), 20.0)
    assert resolve(quotas, REQUEST_PERCENTAGE, "bob", "app") is None


def test_values_are_validated_as_kafka_does() -> None:
    assert parse_value(P, "1048576") == 1048576.0
    assert parse_value(REQUEST_PERCENTAGE, "12.5") == 12.5
    for key, text in ((P, "1.5"), (P, "0"), (P, "-1"), (P, "x"), ("ip_rate", "1")):
        with pytest.raises(ValueError):
            parse_value(key, text)


def test_a_new_rate_divides_by_one_window_at_least() -> None:
    rate = SampledRate(0)
    rate.record(10_000, 0)
    assert rate.window(0) == 1_000
    assert rate.rate(500) == 10_000.0
    assert rate.rate(2_500) == 4_000.0
    assert rate.window(12_500) == 1_000  # every sample expired: reset to now
    assert rate.rate(12_500) == 0.0


def test_samples_roll_and_expire() -> None:
    rate = SampledRate(0)
    for second in range(15):
        rate.record(1_000, second * 1000)
    # 11 samples live (seconds 4..14), the oldest began at 4 s: 11 s of 1,000 bytes each
    assert rate.window(14_999) == 10_999
    assert rate.rate(14_999) == pytest.approx(11_000 / 10.999)


def test_throttle_is_the_time_back_to_the_bound() -> None:
    assert throttle_ms(900.0, 1000.0, 10_000) == 0
    assert throttle_ms(1100.0, 1000.0, 10_000) == 1000
    assert throttle_ms(3000.0, 100.0, 1000, cap_ms=1000) == 1000


@pytest.mark.parametrize("size", [100_000, 500_000, 1_000_000])
def test_a_client_at_full_speed_is_held_to_the_bound_from_its_start(size: int) -> None:
    """A client sending `size` bytes every time it may (it waits out every throttle) sends
    1 MB/s +-5% in every 30 s window, the first included."""
    rate, bound, now, sent = SampledRate(0), 1_000_000.0, 0, {}
    while now < 90_000:
        throttle = record_and_throttle(rate, size, bound, now)
        sent[now] = sent.get(now, 0) + size
        now += max(throttle, 1)
    for start in range(0, 60_000, 1_000):
        window = sum(v for t, v in sent.items() if start <= t < start + 30_000)
        assert window == pytest.approx(30 * bound, rel=0.05), start


def test_describe_filters_match_exact_default_and_specified() -> None:
    quotas = {
        Entity(None, "app"): {P: 1.0},
        Entity(None, DEFAULT): {P: 1.0},
        Entity("alice", None): {P: 1.0},
        Entity("alice", "app"): {P: 1.0},
    }
    assert entities_matching(quotas, [("client-id", "exact", "app")], strict=True) == [
        Entity(None, "app")
    ]
    assert entities_matching(quotas, [("client-id", "exact", "app")], strict=False) == [
        Entity(None, "app"),
        Entity("alice", "app"),
    ]
    assert entities_matching(quotas, [("client-id", "default", None)], strict=True) == [
        Entity(None, DEFAULT)
    ]
    assert len(entities_matching(quotas, [("client-id", "specified", None)], strict=True)) == 2
    assert len(entities_matching(quotas, [], strict=False)) == 4
