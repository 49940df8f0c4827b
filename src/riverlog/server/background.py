"""Long-lived retry loops on the event loop (replica fetchers, the controller's channels).

A `BackgroundLoop` runs its `_run` as a task from construction until `stop()`. Stopping sets
`stopped` as well as cancelling: a loop that retries reconnects checks the flag each round,
so it ends even if a cancellation is lost (Python 3.11's `wait_for` could lose one that races
with the awaited call finishing — see the field notes). `stop_all` stops several and waits a
bounded time for them to end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


class BackgroundLoop:
    def __init__(self) -> None:
        self.stopped = False
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self.stopped = True
        self.task.cancel()


async def stop_all(loops: Iterable[BackgroundLoop], timeout_s: float) -> None:
    stopping = list(loops)
    for loop in stopping:
        loop.stop()
    if stopping:
        await asyncio.wait([loop.task for loop in stopping], timeout=timeout_s)
