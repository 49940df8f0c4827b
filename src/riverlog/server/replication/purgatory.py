"""The purgatory: requests that wait for something to happen, or for their time to run out.

A delayed operation (a fetch waiting for `min_bytes`, a produce waiting for the ISR) watches
one or more keys (topic-partitions). Whoever changes a key — an append, a high watermark
move, a leadership change — calls `check(key)`, and every operation watching it tries to
complete. Each operation completes **exactly once**: through `try_complete` returning a
result, or through `on_expire` when its timeout fires; whichever comes first wins, and a
completed (or cancelled: its client went away) operation is never tried again.

Cost (issue 29: a follower's fetch parks here once per produce). `delay` answers at once,
without a future, when the operation can complete now. Deadlines are kept in the
purgatory's own heap with one event-loop timer for the earliest, instead of a loop timer
per operation: a completed operation leaves its heap entry behind (skipped when its time
comes, the heap rebuilt when such entries outnumber the live ones), and its future has no
callbacks of the purgatory's.

Runs on the event loop thread only; `try_complete` must not block.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar, cast

T = TypeVar("T")

_REBUILD_MIN = 1024
"""Dead heap entries tolerated before a rebuild is considered (then: more than live ones)."""


class DelayedOperation(Generic[T]):
    """One waiting request: a completion check, an expiry answer, and its future."""

    __slots__ = ("future", "keys", "on_expire", "try_complete", "waiting")

    def __init__(
        self,
        try_complete: Callable[[], T | None],
        on_expire: Callable[[], T],
        future: asyncio.Future[T],
        keys: tuple[Hashable, ...],
    ) -> None:
        self.try_complete = try_complete
        self.on_expire = on_expire
        self.future = future
        self.keys = keys
        self.waiting = True
        """Registered under its keys and counted live (until `Purgatory._forget`)."""

    @property
    def done(self) -> bool:
        return self.future.done()


class Purgatory:
    """Delayed operations by watched key."""

    def __init__(self) -> None:
        self._watchers: dict[Hashable, set[DelayedOperation[object]]] = {}
        self._deadlines: list[tuple[float, int, DelayedOperation[object]]] = []
        self._sequence = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")
        self._live = 0
        """Heap entries of operations still waiting (a cancelled one until found out)."""
        self._dead = 0
        """Heap entries of operations completed before their time."""

    def __len__(self) -> int:
        return len({id(op) for ops in self._watchers.values() for op in ops if not op.done})

    def delay(
        self,
        keys: Sequence[Hashable],
        timeout_s: float,
        try_complete: Callable[[], T | None],
        on_expire: Callable[[], T],
    ) -> T | asyncio.Future[T]:
        """The result now if `try_complete` gives one; otherwise a future completed by a
        `check` on a key, or by `on_expire` after `timeout_s`."""
        result = try_complete()
        if result is not None:
            return result
        loop = asyncio.get_running_loop()
        op: DelayedOperation[T] = DelayedOperation(
            try_complete, on_expire, loop.create_future(), tuple(keys)
        )
        watchers = self._watchers
        for key in op.keys:
            watching = watchers.get(key)
            if watching is None:
                watchers[key] = {op}  # type: ignore[arg-type]
            else:
                watching.add(op)  # type: ignore[arg-type]
        if self._dead > _REBUILD_MIN and self._dead > self._live:
            self._deadlines = [entry for entry in self._deadlines if entry[2].waiting]
            heapq.heapify(self._deadlines)
            self._dead = 0
        deadline = loop.time() + timeout_s
        heapq.heappush(
            self._deadlines, (deadline, next(self._sequence), cast("DelayedOperation[object]", op))
        )
        self._live += 1
        if deadline < self._timer_at:
            self._schedule(loop, deadline)
        return op.future

    def check(self, key: Hashable) -> int:
        """Let every operation watching `key` try to complete; returns how many did."""
        watching = self._watchers.get(key)
        if not watching:
            return 0
        completed = 0
        for op in list(watching):
            if op.done:  # completed through another key, or cancelled
                self._forget(op)
                continue
            result = op.try_complete()
            if result is not None:
                op.future.set_result(result)
                self._forget(op)
                completed += 1
        return completed

    def expire_all(self) -> None:
        """Answer every waiting operation now (broker shutdown)."""
        for _, _, op in list(self._deadlines):
            if op.waiting and not op.done:
                op.future.set_result(op.on_expire())
            self._forget(op)
        self._deadlines.clear()
        self._live = self._dead = 0
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_at = None, float("inf")

    def _schedule(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = loop.call_at(when, self._expire_due)

    def _expire_due(self) -> None:
        """The earliest deadline came: expire what is due and still waiting."""
        self._timer, self._timer_at = None, float("inf")
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadlines = self._deadlines
        while deadlines and (deadlines[0][0] <= now or not deadlines[0][2].waiting):
            _, _, op = heapq.heappop(deadlines)
            if not op.waiting:  # completed before its time
                self._dead -= 1
                continue
            if not op.done:
                op.future.set_result(op.on_expire())
            self._forget(op)
            self._dead -= 1  # popped: not in the heap any more
        if deadlines:
            self._schedule(loop, deadlines[0][0])

    def _forget(self, op: DelayedOperation[T]) -> None:
        """Unregister a completed operation from its keys; its heap entry stays, dead, and
        lets go of the request (the heap is rebuilt when dead entries outnumber live)."""
        if not op.waiting:
            return
        op.waiting = False
        op.try_complete = op.on_expire = _gone  # type: ignore[assignment]
        self._live -= 1
        self._dead += 1
        for key in op.keys:
            watching = self._watchers.get(key)
            if watching is not None:
                watching.discard(op)
                if not watching:
                    del self._watchers[key]


def _gone() -> None:
    """What a completed operation holds instead of its request's closures."""
