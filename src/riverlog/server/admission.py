"""Admission to the broker's network layer: who may connect, and how many request bytes may
be in flight — Kafka's `max.connections`, `max.connections.per.ip`,
`max.connections.per.ip.overrides` and `queued.max.request.bytes`.

- `ConnectionQuotas` counts open connections, in all and per client IP. A connection over
  a limit is closed at once, with one log line (Kafka closes a connection over the per-IP
  limit the same way; over `max.connections` Kafka delays accepting, riverlog closes).
  An override `host:count` sets one IP's limit (0 refuses that IP).
- `MemoryPool` is the budget of request bytes read but not yet answered
  (`queued.max.request.bytes`, -1 unbounded). A connection reserves a frame's whole size
  when it reads the 4-byte size; when the pool is exhausted it stops reading until a
  reservation is released (a request answered), then tries again — the oldest waiter
  first. As Kafka's non-strict pool, a reservation succeeds while any budget is left, so
  a request larger than the pool is still served (alone).

Pure bookkeeping on the event-loop thread; the network server calls it.
"""

from __future__ import annotations

import collections
import contextlib
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


class MemoryPool:
    """Bytes of requests in flight, bounded by `capacity` (-1: unbounded)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._waiters: collections.deque[Callable[[], None]] = collections.deque()

    @property
    def bounded(self) -> bool:
        return self.capacity >= 0

    @property
    def waiting(self) -> int:
        """Connections stopped until budget is free, each on the one request it could not
        reserve for."""
        return len(self._waiters)

    def try_reserve(self, nbytes: int) -> bool:
        if self.bounded and self.used >= self.capacity:
            return False
        self.used += nbytes
        return True

    def release(self, nbytes: int) -> None:
        """Give back a reservation; wake waiters while budget is left."""
        if nbytes <= 0:
            return
        self.used -= nbytes
        while self._waiters and (not self.bounded or self.used < self.capacity):
            self._waiters.popleft()()

    def wait(self, wake: Callable[[], None]) -> None:
        """Call `wake()` once budget is free again."""
        self._waiters.append(wake)

    def forget(self, wake: Callable[[], None]) -> None:
        """A waiter that went away (its connection closed)."""
        with contextlib.suppress(ValueError):
            self._waiters.remove(wake)


class ConnectionQuotas:
    """Open connections in all and per IP, against the configured limits."""

    def __init__(self, max_connections: int, per_ip: int, overrides: dict[str, int]) -> None:
        self.max_connections = max_connections
        self.per_ip = per_ip
        self.overrides = dict(overrides)
        self.total = 0
        self.by_ip: collections.Counter[str] = collections.Counter()

    def admit(self, ip: str) -> str | None:
        """Count a new connection from `ip`; or the reason to refuse it (not counted)."""
        limit = self.overrides.get(ip, self.per_ip)
        if self.by_ip[ip] >= limit:
            return (
                f"Rejected connection from {ip}, address already has the configured "
                f"maximum of {limit} connections."
            )
        if self.total >= self.max_connections:
            return (
                f"Rejected connection from {ip}: the broker already has the "
                f"configured maximum of {self.max_connections} connections."
            )
        self.total += 1
        self.by_ip[ip] += 1
        return None

    def release(self, ip: str) -> None:
        self.total -= 1
        self.by_ip[ip] -= 1
        if self.by_ip[ip] <= 0:
            del self.by_ip[ip]
