"""Consumer lag in time, estimated as kafka-lag-exporter does: from the log end offsets seen
at successive scrapes, interpolate when the record at a group's committed offset was
written; the lag in seconds is how long ago that was. Pure: times come in as `now_ms`.

A point is kept per partition each time its end offset moves (at most `keep` of them), so a
quiet partition costs one point. A committed offset older than every point is at least as
old as the oldest point: that lower bound is what is reported. No lag (committed at the end)
is 0 seconds.
"""

from __future__ import annotations

from collections import deque

from riverlog.model import TopicPartition


class EndOffsetHistory:
    def __init__(self, keep: int = 360) -> None:
        self.keep = keep
        self._points: dict[TopicPartition, deque[tuple[int, int]]] = {}

    def observe(self, tp: TopicPartition, now_ms: int, end: int) -> None:
        points = self._points.get(tp)
        if points is None:
            points = self._points[tp] = deque(maxlen=self.keep)
        if not points or end > points[-1][1]:
            points.append((now_ms, end))
        elif end < points[-1][1]:  # the log was truncated or recreated: start again
            points.clear()
            points.append((now_ms, end))

    def forget_except(self, keep: set[TopicPartition]) -> None:
        for tp in list(self._points):
            if tp not in keep:
                del self._points[tp]

    def seconds_behind(self, tp: TopicPartition, committed: int, now_ms: int) -> float:
        points = self._points.get(tp)
        if not points or committed >= points[-1][1]:
            return 0.0
        previous: tuple[int, int] | None = None
        for at, end in points:
            if end > committed:
                if previous is None:
                    return max(now_ms - at, 0) / 1000
                t0, e0 = previous
                written = t0 + (at - t0) * (committed + 1 - e0) / (end - e0)
                return max(now_ms - written, 0.0) / 1000
            previous = (at, end)
        return 0.0
