"""The purgatory: requests that wait for something to happen, or for their time to run out.

A delayed operation (a fetch waiting for `min_bytes`, later a produce waiting for the ISR)
watches one or more keys (topic-partitions). Whoever changes a key — an append, a high
watermark move, a leadership change — calls `check(key)`, and every operation watching it
tries to complete. Each operation completes **exactly once**: through `try_complete`
returning a result, or through `on_expire` when its timeout fires; whichever comes first
wins and unregisters it from every key and cancels its timer.

Runs on the event loop thread only; `try_complete` must not block.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class DelayedOperation(Generic[T]):
    """One waiting request: a completion check, an expiry answer, and its future."""

    def __init__(self, try_complete: Callable[[], T | None], on_expire: Callable[[], T]) -> None:
        self.try_complete = try_complete
        self.on_expire = on_expire
        self.future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self.keys: tuple[Hashable, ...] = ()
        self.timer: asyncio.TimerHandle | None = None

    @property
    def done(self) -> bool:
        return self.future.done()


class Purgatory:
    """Delayed operations by watched key."""

    def __init__(self) -> None:
        self._watchers: dict[Hashable, set[DelayedOperation[object]]] = {}

    def __len__(self) -> int:
        return len({id(op) for ops in self._watchers.values() for op in ops})

    def delay(
        self,
        keys: Sequence[Hashable],
        timeout_s: float,
        try_complete: Callable[[], T | None],
        on_expire: Callable[[], T],
    ) -> asyncio.Future[T]:
        """Complete now if possible; otherwise wait for `check` on a key, or the timeout."""
        op: DelayedOperation[T] = DelayedOperation(try_complete, on_expire)
        result = try_complete()
        if result is not None:
            op.future.set_result(result)
            return op.future
        op.keys = tuple(keys)
        for key in op.keys:
            self._watchers.setdefault(key, set()).add(op)  # type: ignore[arg-type]
        op.timer = asyncio.get_running_loop().call_later(timeout_s, self._expire, op)
        op.future.add_done_callback(lambda _: self._forget(op))  # cancelled by a disconnect
        return op.future

    def check(self, key: Hashable) -> int:
        """Let every operation watching `key` try to complete; returns how many did."""
        completed = 0
        for op in list(self._watchers.get(key, ())):
            if op.done:
                continue
            result = op.try_complete()
            if result is not None:
                op.future.set_result(result)
                self._forget(op)
                completed += 1
        return completed

    def expire_all(self) -> None:
        """Answer every waiting operation now (broker shutdown)."""
        for op in {id(o): o for ops in self._watchers.values() for o in ops}.values():
            self._expire(op)

    def _expire(self, op: DelayedOperation[T]) -> None:
        if not op.done:
            op.future.set_result(op.on_expire())
            self._forget(op)

    def _forget(self, op: DelayedOperation[T]) -> None:
        if op.timer is not None:
            op.timer.cancel()
        keys, op.keys = op.keys, ()
        for key in keys:
            watching = self._watchers.get(key)
            if watching is not None:
                watching.discard(op)
                if not watching:
                    del self._watchers[key]
