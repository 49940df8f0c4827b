"""The activity events of the reference pipeline: page views and clicks, as JSON keyed by
user id (design doc 003's activity stream).

`generate(count, start_ms, seed)` yields the same events for the same arguments: event times
move forward about `STEP_MS` per event, each up to `JITTER_MS` early or late (so they arrive
somewhat out of order, as real activity does); about one event in four is a click on the page
the user viewed last. `closing_event(last_ms)` is a page view far enough past the others that
the streaming job's watermark passes every real minute and session, so all are emitted.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass

PAGE_VIEWS = "page_views"
CLICKS = "clicks"
COUNTS = "pageview_counts"
TOPICS = (PAGE_VIEWS, CLICKS)
STEP_MS = 500
JITTER_MS = 20_000
WATERMARK = "10 minutes"
SESSION_GAP = "5 minutes"
CLOSING_USER = "closing-event"
PAGES = [
    "/",
    "/search",
    "/products",
    "/products/1",
    "/products/2",
    "/products/3",
    "/cart",
    "/checkout",
    "/help",
    "/account",
]
ELEMENTS = ["buy", "add-to-cart", "next", "details", "logo"]

# The events' JSON schema, for Spark's from_json.
EVENT_SCHEMA = "event STRING, user_id STRING, page STRING, element STRING, ts BIGINT"


@dataclass(frozen=True)
class Event:
    topic: str
    user_id: str
    page: str
    ts: int
    element: str | None = None

    def value(self) -> bytes:
        body = {
            "event": "click" if self.topic == CLICKS else "page_view",
            "user_id": self.user_id,
            "page": self.page,
            "ts": self.ts,
        }
        if self.element is not None:
            body["element"] = self.element
        return json.dumps(body, separators=(",", ":")).encode()


def generate(count: int, start_ms: int, seed: int = 7, users: int = 500) -> Iterator[Event]:
    rng = random.Random(seed)
    last_page: dict[str, str] = {}
    for i in range(count):
        user = f"user-{rng.randrange(users):04d}"
        ts = start_ms + i * STEP_MS + rng.randrange(-JITTER_MS, JITTER_MS + 1)
        ts = max(ts, start_ms)
        if user in last_page and rng.random() < 0.25:
            yield Event(CLICKS, user, last_page[user], ts, rng.choice(ELEMENTS))
        else:
            page = rng.choice(PAGES)
            last_page[user] = page
            yield Event(PAGE_VIEWS, user, page, ts)


def closing_event(last_ms: int) -> Event:
    return Event(PAGE_VIEWS, CLOSING_USER, "/", last_ms + 30 * 60_000)


def span_ms(count: int) -> int:
    """How much event time `count` events cover (up to the jitter)."""
    return count * STEP_MS + JITTER_MS
