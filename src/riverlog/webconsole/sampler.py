"""The console's sampler: every `interval_s` it reads every group's committed offsets and
every partition's start and end offsets and size, and adds them to the `History` as one
`Sample`. A failed round is logged once and retried at the next tick; the pages keep serving
what the history holds.

Invariant: at most one round runs at a time; `stop()` ends the loop and waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from riverlog.model import TopicPartition
from riverlog.protocol.error_codes import KafkaError
from riverlog.webconsole.history import History, Sample
from riverlog.webconsole.queries import EARLIEST, LATEST, ConsoleClient

log = logging.getLogger(__name__)


class Sampler:
    def __init__(self, client: ConsoleClient, history: History, interval_s: float) -> None:
        self.client = client
        self.history = history
        self.interval_s = interval_s
        self.sampled = asyncio.Event()
        """Set after each successful round (tests and pages wait on it)."""
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="console-sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def sample_once(self) -> Sample:
        client = self.client
        view = await client.view()
        tps: list[TopicPartition] = [
            (t.name, p.partition) for t in view.topics for p in t.partitions
        ]
        groups = await client.admin.list_groups()
        committed: dict[str, dict[TopicPartition, int]] = {}
        for g in groups:
            try:
                committed[g.group_id] = await client.admin.group_offsets(g.group_id)
            except KafkaError as e:  # e.g. not authorised for this group: leave it out
                log.debug("console sampler: offsets of group %s: %s", g.group_id, e)
        ends, starts, sizes = await asyncio.gather(
            client.offsets(tps, LATEST), client.offsets(tps, EARLIEST), client.partition_sizes(view)
        )
        at_ms = int(time.time() * 1000)
        latest = self.history.latest
        if latest is not None and at_ms <= latest.at_ms:
            at_ms = latest.at_ms + 1
        sample = Sample(
            at_ms, ends, starts, sizes, committed, {g.group_id: g.state for g in groups}
        )
        self.history.add(sample)
        return sample

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.sample_once()
                if self._failing:
                    log.info("console sampler: sampling again")
                self._failing = False
                self.sampled.set()
            except (KafkaError, ConnectionError, OSError, TimeoutError) as e:
                if not self._failing:
                    log.warning("console sampler: round failed (%s); retrying each tick", e)
                self._failing = True
            await asyncio.sleep(max(self.interval_s - (time.monotonic() - started), 0.05))
