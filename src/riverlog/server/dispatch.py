"""Request dispatch: API key → handler, and the ApiVersions answer derived from that table.

A handler takes a `RequestContext` and returns the response body, `None` for no response
(produce with acks=0), or an awaitable of either (long polls, acks=all). Handlers are small
functions registered per API; the ApiVersions response lists exactly the registered APIs, so
what the broker advertises cannot drift from what it implements.

Advertised versions follow one real Kafka release (`KAFKA_RELEASE_MAX_VERSIONS`, Kafka 3.9 —
the last release with ZooKeeper mode, the design riverlog follows): clients such as
kafka-python infer the broker's release from the advertised maxima and limit themselves to
it, so a mix no release ever had would mislead them. The range is capped by what the
generated codec implements.

A handler that raises is a bug: the error is logged and that one connection closed (the
client retries elsewhere or reconnects); other connections are untouched.

With `metrics.listener` set, `metrics` (server/metrics/requests.py) is told of every
request answered or failed: an answer ready at once is counted here and its API key
appended to `metrics.answered`, which the network layer times once per read; an awaited
one is counted and timed when it is ready. Unset, the cost is one attribute check.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from riverlog.protocol.api import ApiMessage
from riverlog.protocol.error_codes import UNSUPPORTED_VERSION
from riverlog.protocol.framing import Request
from riverlog.protocol.messages import ApiVersionsRequest, ApiVersionsResponse

if TYPE_CHECKING:
    from riverlog.server.metrics.requests import RequestMetrics
    from riverlog.server.network import Connection

log = logging.getLogger(__name__)
FETCH = 1
"""Produce (0) and Fetch (1): the API keys whose answers metrics count per topic."""

Response = ApiMessage | None


@dataclass(slots=True)
class RequestContext:
    """What a handler gets: the decoded request and where it came from."""

    request: Request
    connection: Connection | None

    @property
    def version(self) -> int:
        return self.request.api_version

    @property
    def client_id(self) -> str | None:
        return self.request.header.client_id


Handler = Callable[[RequestContext], Response | Awaitable[Response]]

# Max version per API key of Kafka 3.9 (ZooKeeper mode), min version 0 throughout.
KAFKA_RELEASE = "3.9"
KAFKA_RELEASE_MAX_VERSIONS: dict[int, int] = {
    0: 11,
    1: 17,
    2: 9,
    3: 12,
    4: 7,
    5: 4,
    6: 8,
    7: 3,
    8: 9,
    9: 9,
    10: 6,
    11: 9,
    12: 4,
    13: 5,
    14: 5,
    15: 5,
    16: 5,
    17: 1,
    18: 4,
    19: 7,
    20: 6,
    21: 2,
    22: 5,
    23: 4,
    24: 5,
    25: 4,
    26: 4,
    27: 1,
    28: 4,
    29: 3,
    30: 3,
    31: 3,
    32: 4,
    33: 2,
    34: 2,
    35: 4,
    36: 2,
    37: 3,
    38: 3,
    39: 2,
    40: 2,
    41: 3,
    42: 2,
    43: 2,
    44: 1,
    45: 0,
    46: 0,
    47: 0,
    48: 1,
    49: 1,
    50: 0,
    51: 0,
    56: 3,
    57: 1,
    58: 0,
    60: 1,
    61: 0,
    65: 0,
    66: 1,
    67: 0,
    68: 0,
    69: 0,
}


@dataclass(frozen=True, slots=True)
class _Entry:
    request_cls: type[ApiMessage]
    handler: Handler
    max_version: int


class Dispatcher:
    """The table of handlers; owned by the broker, used from the event loop only."""

    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}
        self.metrics: RequestMetrics | None = None
        self.register(ApiVersionsRequest, self._handle_api_versions)

    def register(self, request_cls: type[ApiMessage], handler: Handler) -> None:
        key = request_cls.API_KEY
        if key in self._entries:
            raise ValueError(f"a handler for {request_cls.NAME} is already registered")
        max_version = min(request_cls.MAX_VERSION, KAFKA_RELEASE_MAX_VERSIONS.get(key, -1))
        if max_version < 0:
            raise ValueError(f"{request_cls.NAME} is not part of Kafka {KAFKA_RELEASE}")
        self._entries[key] = _Entry(request_cls, handler, max_version)

    def request_classes(self) -> list[type[ApiMessage]]:
        return [e.request_cls for _, e in sorted(self._entries.items())]

    def supported(self) -> dict[int, tuple[int, int]]:
        """API key → (min, max) version advertised."""
        return {key: (0, e.max_version) for key, e in sorted(self._entries.items())}

    def dispatch(
        self, request: Request, connection: Connection | None
    ) -> Response | Awaitable[Response]:
        key = request.header.request_api_key  # the field, not the property (a call)
        entry = self._entries.get(key)
        if entry is None:
            raise UnhandledApiError(key)
        context = RequestContext(request, connection)
        metrics = self.metrics
        try:
            result = entry.handler(context)
        except Exception:
            log.exception("handler for %s v%d failed", entry.request_cls.NAME, context.version)
            if metrics is not None:
                metrics.failed(request, metrics.started)
            raise
        if result is None or isinstance(result, ApiMessage):  # a plain class: a cheap check
            if metrics is not None:  # counted now, timed per read (metrics/requests.py)
                metrics.answered.append(key)
                if key <= FETCH:
                    metrics.count_records(request, result)
                elif metrics.error_coded[key] and result is not None:
                    code = result.error_code  # type: ignore[attr-defined]
                    if code:
                        metrics.error(key, code)
            return result
        started = 0.0 if metrics is None else metrics.started
        if isinstance(result, asyncio.Future):
            # A future (the purgatory's: a parked fetch, an acks=all produce) is answered as
            # it is, watched by a done callback: a coroutine around it made a task — its
            # creation, two more event-loop turns and three more handles per delayed answer,
            # on the leader once per follower fetch (issue 29).
            settled = functools.partial(_settled, entry.request_cls.NAME, metrics, request, started)
            result.add_done_callback(settled)
            return result
        return _guarded(result, entry.request_cls.NAME, metrics, request, started)

    def _api_keys(self) -> list[ApiVersionsResponse.ApiVersion]:
        return [
            ApiVersionsResponse.ApiVersion(api_key=key, min_version=low, max_version=high)
            for key, (low, high) in self.supported().items()
        ]

    def _handle_api_versions(self, context: RequestContext) -> ApiVersionsResponse:
        return ApiVersionsResponse(error_code=0, api_keys=self._api_keys(), throttle_time_ms=0)

    def unsupported_api_versions(self) -> ApiVersionsResponse:
        """The v0 answer to an ApiVersions request of a version we do not know (KIP-511)."""
        return ApiVersionsResponse(error_code=UNSUPPORTED_VERSION.code, api_keys=self._api_keys())


class UnhandledApiError(Exception):
    """A request for an API the broker does not advertise; its connection is closed."""

    def __init__(self, api_key: int) -> None:
        super().__init__(f"no handler for API key {api_key}")


def _settled(
    name: str,
    metrics: RequestMetrics | None,
    request: Request,
    started: float,
    future: asyncio.Future[Any],
) -> None:
    """`_guarded`'s work for a future: log a failure, count and time the answer."""
    if future.cancelled():  # its connection went away, or the broker stops
        return
    error = future.exception()
    if error is not None:
        log.error("handler for %s failed", name, exc_info=error)
        if metrics is not None:
            metrics.failed(request, started)
    elif metrics is not None:
        metrics.done(request, future.result(), started)


async def _guarded(
    result: Awaitable[Any],
    name: str,
    metrics: RequestMetrics | None,
    request: Request,
    started: float,
) -> Response:
    try:
        response: Response = await result
    except Exception:
        log.exception("handler for %s failed", name)
        if metrics is not None:
            metrics.failed(request, started)
        raise
    if metrics is not None:
        metrics.done(request, response, started)
    return response
