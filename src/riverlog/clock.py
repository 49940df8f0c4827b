"""The clock, injected: every component of the broker that needs the time asks the `Clock`
it was given instead of reading `time` itself, so that tests can hand pure rules chosen
times and a whole component a clock of their own.

Two kinds of time: wall-clock milliseconds (record timestamps, ISR lag as Kafka measures it,
group session deadlines, znode timestamps) and monotonic seconds (timeouts, throttles, idle
connections), which never jump with the system clock.
"""

from __future__ import annotations

import time


class Clock:
    """The system clock; subclass to control time in tests."""

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def wall_ns(self) -> int:
        return time.time_ns()

    def monotonic_s(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK = Clock()
"""The clock of components that are given none."""
