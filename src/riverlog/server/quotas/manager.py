"""The broker's client quotas: the quotas it holds (read from the store at start-up and again
for every `/config/changes` notification of a `clients/...` or `users/...` entity), the
rates of its clients, and what a request's answer carries (KIP-219).

The network layer calls `throttle` for every request of a connection while any quota is set
(`active`; with none, the cost is that one check): Produce requests count their size against
`producer_byte_rate`, Fetch answers to consumers their records' bytes against
`consumer_byte_rate`, and every request but the exempt ones (follower fetches, the
controller's requests, ApiVersions and SASL) the time its handler ran against
`request_percentage`. The largest throttle is written into the answer's `throttle_time_ms`
(the answer goes out at once) and the connection is muted — not read — for that long
(`Connection.mute`).

Metrics (Kafka's MBeans `kafka.server:type=Produce|Fetch|Request,user=,client-id=` through
the JMX exporter): `kafka_server_{produce,fetch}_byte_rate`,
`kafka_server_request_request_time` and `kafka_server_{produce,fetch,request}_throttle_time`
(the mean throttle in ms over the quota window) per (user, client_id) that has a quota.

Invariant: rates survive quota changes (a new bound applies to the rate measured so far);
the rules are in `rules.py`, pure; only this module reads the clock for them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily, Metric

from riverlog.metadata.store import MetadataStore
from riverlog.server.quotas import store as quota_store
from riverlog.server.quotas.rules import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    WINDOW_NUM,
    WINDOW_SIZE_MS,
    SampledRate,
    SensorKey,
    percentage_of_thread,
    record_and_throttle,
    resolve,
)

if TYPE_CHECKING:
    from riverlog.clock import Clock
    from riverlog.protocol.framing import Request

log = logging.getLogger(__name__)
PRODUCE, FETCH = 0, 1
EXEMPT_FROM_REQUEST_QUOTA = frozenset({4, 5, 6, 7, 17, 18, 36})
"""LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown, SaslHandshake,
ApiVersions, SaslAuthenticate: never throttled (Kafka exempts cluster actions and these)."""
METRIC_TYPES = {PRODUCER_BYTE_RATE: "produce", CONSUMER_BYTE_RATE: "fetch"}


def user_of(principal: str) -> str:
    """The user a quota names: the principal's name (`User:alice` -> alice)."""
    return principal.split(":", 1)[1] if ":" in principal else principal


class QuotaManager:
    def __init__(
        self,
        store: MetadataStore,
        clock: Clock,
        samples: int = WINDOW_NUM,
        window_ms: int = WINDOW_SIZE_MS,
    ) -> None:
        """`samples` and `window_ms`: `quota.window.num`, `quota.window.size.seconds`."""
        self.store = store
        self.clock = clock
        self.samples, self.window_ms = samples, window_ms
        self.quotas: quota_store.Quotas = {}
        self.active = False
        self._keys: set[str] = set()
        self._rates: dict[tuple[str, SensorKey], SampledRate] = {}
        self._throttles: dict[tuple[str, SensorKey], SampledRate] = {}
        self._resolved: dict[tuple[str, str, str], tuple[SensorKey, float] | None] = {}

    # -- the quotas held ----------------------------------------------------------------

    def reload(self) -> None:
        """Re-read every quota (start-up, a re-established store session)."""
        self._set(quota_store.read_all(self.store))

    def changed(self, entity_path: str) -> None:
        """A `/config/changes` notification of a user or client entity."""
        try:
            entity = quota_store.entity_of_change(entity_path)
        except ValueError:
            log.warning("config change of %s ignored: not a quota entity", entity_path)
            return
        quotas = dict(self.quotas)
        found = quota_store.read(self.store, entity)
        if found:
            quotas[entity] = found
        else:
            quotas.pop(entity, None)
        self._set(quotas)

    def _set(self, quotas: quota_store.Quotas) -> None:
        if quotas != self.quotas:
            log.info("client quotas: %s", {e.path: q for e, q in quotas.items()} or "none")
        self.quotas = quotas
        self._keys = {k for q in quotas.values() for k in q}
        self._resolved = {}
        self.active = bool(quotas)

    def _bound(self, key: str, user: str, client_id: str) -> tuple[SensorKey, float] | None:
        cache_key = (key, user, client_id)
        try:
            return self._resolved[cache_key]
        except KeyError:
            found = self._resolved[cache_key] = resolve(self.quotas, key, user, client_id)
            return found

    def _record(self, key: str, user: str, client_id: str, value: float, now_ms: int) -> int:
        found = self._bound(key, user, client_id)
        if found is None:
            return 0
        sensor, bound = found
        rate = self._rates.get((key, sensor))
        if rate is None:
            rate = self._rates[(key, sensor)] = SampledRate(now_ms, self.samples, self.window_ms)
        cap = self.window_ms if key == REQUEST_PERCENTAGE else None
        throttle = record_and_throttle(rate, value, bound, now_ms, cap)
        throttles = self._throttles.get((key, sensor))
        if throttles is None:
            throttles = self._throttles[(key, sensor)] = SampledRate(
                now_ms, self.samples, self.window_ms
            )
        throttles.record(throttle, now_ms)
        return throttle

    # -- per request ----------------------------------------------------------------------

    def throttle(
        self,
        principal: str,
        request: Request,
        response: Any,
        request_bytes: int,
        handler_seconds: float,
    ) -> int:
        """Record a request answered with `response` and return its throttle in ms (0: none);
        the throttle is also written into the answer's `throttle_time_ms`."""
        key = request.header.request_api_key
        user, client_id = user_of(principal), request.header.client_id or ""
        now_ms = int(self.clock.monotonic_s() * 1000)
        throttle = 0
        keys = self._keys
        if key == PRODUCE and PRODUCER_BYTE_RATE in keys:
            throttle = self._record(PRODUCER_BYTE_RATE, user, client_id, request_bytes, now_ms)
        elif key == FETCH and CONSUMER_BYTE_RATE in keys and response is not None:
            body: Any = request.body
            follower = body.replica_id >= 0 or getattr(body.replica_state, "replica_id", -1) >= 0
            if follower:
                return 0
            size = sum(
                len(p.records) for t in response.responses for p in t.partitions if p.records
            )
            throttle = self._record(CONSUMER_BYTE_RATE, user, client_id, size, now_ms)
        if REQUEST_PERCENTAGE in keys and key not in EXEMPT_FROM_REQUEST_QUOTA:
            used = percentage_of_thread(handler_seconds)
            throttle = max(
                throttle, self._record(REQUEST_PERCENTAGE, user, client_id, used, now_ms)
            )
        if throttle and response is not None and hasattr(response, "throttle_time_ms"):
            response.throttle_time_ms = max(response.throttle_time_ms, throttle)
        return throttle

    # -- metrics --------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        now_ms = int(self.clock.monotonic_s() * 1000)
        labels = ["user", "client_id"]
        families = {
            "produce_byte_rate": "Produce request bytes per second, per quota sensor",
            "fetch_byte_rate": "Fetch response bytes per second, per quota sensor",
            "request_request_time": "Request handler time, percent of one thread",
            "produce_throttle_time": "Mean produce throttle (ms) over the quota window",
            "fetch_throttle_time": "Mean fetch throttle (ms) over the quota window",
            "request_throttle_time": "Mean request-time throttle (ms) over the quota window",
        }
        out = {
            name: GaugeMetricFamily(f"kafka_server_{name}", doc, labels=labels)
            for name, doc in families.items()
        }
        for (key, (user, client_id)), rate in sorted(self._rates.items()):
            kind = METRIC_TYPES.get(key, "request")
            value_name = "request_request_time" if kind == "request" else f"{kind}_byte_rate"
            out[value_name].add_metric([user, client_id], rate.rate(now_ms))
            throttles = self._throttles[(key, (user, client_id))]
            out[f"{kind}_throttle_time"].add_metric([user, client_id], throttles.average(now_ms))
        yield from out.values()
