"""Replication throttling, so that moving replicas does not starve clients (Kafka's
`leader.replication.throttled.rate` / `follower.replication.throttled.rate`, bytes per second
per broker, and the topic configs `leader.replication.throttled.replicas` /
`follower.replication.throttled.replicas`).

Which replicas: a topic's list names `partition:broker` pairs ("0:101,1:102"), or "*" for
all; the leader side throttles the partitions whose pair names this (leading) broker, the
follower side those whose pair names this (following) broker. As in Kafka, only replicas
that are catching up are throttled — a follower in the ISR never is, so acks=all produce
never waits on a throttle.

How much: one token bucket per broker and side (`ReplicationQuota`), filled at the rate up
to one second's worth; the bytes of throttled partitions are taken from it, and while it is
in debt those partitions are left out (of the leader's fetch responses, of the follower's
fetch requests), so the throttled traffic averages the rate; other partitions flow freely.
The rates are dynamic broker configs: the broker sets `rate` on its running quotas when they
change (`Broker.reload_broker_config`). Pure: callers pass the monotonic time.
"""

from __future__ import annotations

UNLIMITED = 2**63 - 1


def throttled(spec: str, partition: int, broker_id: int) -> bool:
    """Whether a `*.replication.throttled.replicas` value names `partition` on `broker_id`."""
    spec = spec.strip()
    if not spec:
        return False
    if spec == "*":
        return True
    wanted = f"{partition}:{broker_id}"
    return any(item.strip() == wanted for item in spec.split(","))


class ReplicationQuota:
    def __init__(self, rate: int) -> None:
        self.rate = rate
        """Bytes per second; `UNLIMITED` (Kafka's default) throttles nothing."""
        self._tokens = float(min(rate, UNLIMITED))
        self._at: float | None = None

    @property
    def limited(self) -> bool:
        return self.rate < UNLIMITED

    def _refill(self, now: float) -> None:
        if self._at is not None:
            self._tokens = min(float(self.rate), self._tokens + (now - self._at) * self.rate)
        self._at = now

    def exceeded(self, now: float) -> bool:
        """Whether throttled traffic must pause now (the bucket is in debt)."""
        if not self.limited:
            return False
        self._refill(now)
        return self._tokens <= 0

    def record(self, size: int, now: float) -> None:
        """Throttled traffic of `size` bytes went through."""
        if self.limited:
            self._refill(now)
            self._tokens -= size

    def delay_s(self, now: float) -> float:
        """How long until throttled traffic may flow again (0: now)."""
        if not self.exceeded(now):
            return 0.0
        return -self._tokens / self.rate
