"""Client quotas' pure rules, as Kafka's ClientQuotaManager has them: which quota applies to a
(user, client-id), the rate a client is measured at, and how long it is throttled.

Quotas. `producer_byte_rate` (bytes/s of produce requests), `consumer_byte_rate` (bytes/s of
fetch responses) and `request_percentage` (percent of one request thread's time, per quota
window) are set on entities: a user, a client-id, or a client-id of a user, each by name or
`<default>`. A request is measured against the first entity of Kafka's precedence that has
the quota (`resolve`): users/U/clients/C, users/U/clients/<default>, users/U,
users/<default>/clients/C, users/<default>/clients/<default>, users/<default>, clients/C,
clients/<default>. Clients matched by one entity share one rate (`SensorKey`): a named part
is shared by all its clients, a `<default>` part gives each user (client-id) its own.

Rates (`SampledRate`): `quota.window.num` (11) samples of `quota.window.size.seconds` (1 s);
a sample starts at the first record after the previous one ended; samples older than all of
them together are reset; the rate divides the samples' sum by the time since the oldest
sample began, but by no less than one window. One deliberate difference from Kafka's `Rate`,
which divides by no less than `quota.window.num - 1` windows: with that padding a greedy
client may send ~10 s of quota at once whenever its samples are empty — at its start, and
again each time that burst's sample expires 11 s later — so 30 s of it measure 0.8-1.3x
its quota (docs/field-notes.md); with one window the burst is one second's worth and a
greedy client is held within a few percent.

Throttle (`throttle_ms`): a request that takes its rate above the bound is answered at once
with `throttle_time_ms = (rate - bound) / bound * window`, the time after which the rate
would be back at the bound (KIP-219); request-time throttles are capped at one window, as
Kafka's ClientRequestQuotaManager caps them.

The manager builds its rates with the broker's `quota.window.num` and
`quota.window.size.seconds` (`WINDOW_NUM` and `WINDOW_SIZE_MS` are Kafka's defaults).

Pure: every function takes `now_ms`; nothing here reads a clock or the store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
DEFAULT = "<default>"
USER, CLIENT_ID = "user", "client-id"
"""Kafka's entity types in DescribeClientQuotas / AlterClientQuotas."""
WINDOW_NUM = 11
WINDOW_SIZE_MS = 1000


@dataclass(frozen=True, slots=True)
class Entity:
    """A quota entity: `user` and `client_id` are a name, `DEFAULT`, or None (not a part)."""

    user: str | None = None
    client_id: str | None = None

    @property
    def path(self) -> str:
        """The entity's path under /config: `users/U`, `clients/C`, `users/U/clients/C`."""
        if self.user is not None and self.client_id is not None:
            return f"users/{self.user}/clients/{self.client_id}"
        if self.user is not None:
            return f"users/{self.user}"
        if self.client_id is not None:
            return f"clients/{self.client_id}"
        raise ValueError("an entity has a user, a client-id or both")

    @classmethod
    def from_path(cls, path: str) -> Entity:
        """The inverse of `path`; ValueError for anything else."""
        parts = path.split("/")
        if len(parts) == 2 and parts[0] == "users" and parts[1]:
            return cls(user=parts[1])
        if len(parts) == 2 and parts[0] == "clients" and parts[1]:
            return cls(client_id=parts[1])
        named = all(parts[1::2])
        if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients" and named:
            return cls(user=parts[1], client_id=parts[3])
        raise ValueError(f"not a quota entity path: {path!r}")


SensorKey = tuple[str, str]
"""Whose rate: (user, client-id) as Kafka tags its sensors; "" for a part not in the entity."""


def precedence(user: str, client_id: str) -> list[Entity]:
    """The entities that may hold a quota for (user, client-id), first match wins."""
    return [
        Entity(user, client_id),
        Entity(user, DEFAULT),
        Entity(user, None),
        Entity(DEFAULT, client_id),
        Entity(DEFAULT, DEFAULT),
        Entity(DEFAULT, None),
        Entity(None, client_id),
        Entity(None, DEFAULT),
    ]


def resolve(
    quotas: Mapping[Entity, Mapping[str, float]], key: str, user: str, client_id: str
) -> tuple[SensorKey, float] | None:
    """Which rate a request of (user, client-id) counts in and its bound for quota `key`;
    None when no entity sets it (unlimited)."""
    for entity in precedence(user, client_id):
        bound = quotas.get(entity, {}).get(key)
        if bound is not None:
            sensor = (
                "" if entity.user is None else user,
                "" if entity.client_id is None else client_id,
            )
            return sensor, bound
    return None


def parse_value(key: str, text: str) -> float:
    """A quota's value as ZooKeeper holds it (a number); ValueError for an unknown key or a
    value that is not a positive number (Kafka's validation: byte rates are longs, the
    request percentage a double)."""
    if key not in QUOTA_KEYS:
        raise ValueError(f"unknown quota {key!r}")
    value = float(text)
    if key != REQUEST_PERCENTAGE and value != int(value):
        raise ValueError(f"{key} must be a whole number of bytes per second, not {text!r}")
    if not value > 0:
        raise ValueError(f"{key} must be positive, not {text!r}")
    return value


def entities_matching(
    quotas: Mapping[Entity, Mapping[str, float]],
    wanted: list[tuple[str, str, str | None]],
    strict: bool,
) -> list[Entity]:
    """DescribeClientQuotas' filter: `wanted` holds (entity type, match, name) with match
    "exact" (that name), "default" or "specified" (any name, or the default); `strict`: the
    entities have no other parts."""
    out = []
    for entity in sorted(quotas, key=lambda e: e.path):
        parts = {"user": entity.user, "client-id": entity.client_id}
        ok = True
        for kind, match, name in wanted:
            have = parts.get(kind)
            if have is None:
                ok = False
            elif match == "exact":
                ok = have == name
            elif match == "default":
                ok = have == "<default>"
            if not ok:
                break
        if ok and strict:
            ok = {k for k, v in parts.items() if v is not None} == {k for k, _, _ in wanted}
        if ok:
            out.append(entity)
    return out


class SampledRate:
    """Kafka's `Rate` over a `SampledStat` of `samples` windows of `window_ms`; also the
    average of what was recorded (`average`, for throttle-time metrics)."""

    __slots__ = ("_counts", "_current", "_starts", "_values", "samples", "window_ms")

    def __init__(self, now_ms: int, samples: int = WINDOW_NUM, window_ms: int = WINDOW_SIZE_MS):
        self.samples, self.window_ms = samples, window_ms
        self._starts = [now_ms]
        self._values = [0.0]
        self._counts = [0]
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        i = self._current
        if now_ms >= self._starts[i] + self.window_ms:  # the current sample is complete
            i = (i + 1) % self.samples
            if i >= len(self._starts):
                self._starts.append(now_ms)
                self._values.append(0.0)
                self._counts.append(0)
            else:
                self._starts[i], self._values[i], self._counts[i] = now_ms, 0.0, 0
            self._current = i
        self._values[i] += value
        self._counts[i] += 1

    def _purge(self, now_ms: int) -> None:
        expiry = self.samples * self.window_ms
        for i, start in enumerate(self._starts):
            if now_ms - start >= expiry:
                self._starts[i], self._values[i], self._counts[i] = now_ms, 0.0, 0

    def window(self, now_ms: int) -> float:
        """The milliseconds the rate divides by: since the oldest sample began, at least one
        window (see the module docstring for why not Kafka's `samples - 1`)."""
        self._purge(now_ms)
        return float(max(now_ms - min(self._starts), self.window_ms))

    def rate(self, now_ms: int) -> float:
        """What was recorded per second."""
        window = self.window(now_ms)
        return sum(self._values) / (window / 1000.0)

    def average(self, now_ms: int) -> float:
        """The mean of the values recorded in the live samples (0 when none)."""
        self._purge(now_ms)
        count = sum(self._counts)
        return sum(self._values) / count if count else 0.0


def throttle_ms(rate: float, bound: float, window_ms: float, cap_ms: float | None = None) -> int:
    """How long a client measured at `rate` against `bound` is throttled (0 within it)."""
    if rate <= bound:
        return 0
    ms = (rate - bound) / bound * window_ms
    if cap_ms is not None:
        ms = min(ms, cap_ms)
    return round(ms)


def record_and_throttle(
    sensor: SampledRate, value: float, bound: float, now_ms: int, cap_ms: float | None = None
) -> int:
    """Record `value` in `sensor`, then the throttle its new rate earns (Kafka records
    first, then checks the quota)."""
    sensor.record(value, now_ms)
    rate = sensor.rate(now_ms)
    if rate <= bound:
        return 0
    return throttle_ms(rate, bound, sensor.window(now_ms), cap_ms)


def percentage_of_thread(seconds: float) -> float:
    """Request time as `request_percentage` counts it: percent of one thread's second."""
    return seconds * 100.0
