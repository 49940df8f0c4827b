"""A running web console for tests: the aiohttp app of `riverlog console` on its own event
loop thread, bound to a free loopback port, sampling every `interval_s`.

    with running_console(bootstrap, interval_s=0.3) as console:
        console.url            # http://127.0.0.1:PORT
        console.wait_for_samples(3)
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator, Mapping

from aiohttp import web

from riverlog.webconsole.app import build_app
from riverlog.webconsole.history import History
from riverlog.webconsole.queries import ConsoleClient


class RunningConsole:
    def __init__(
        self, bootstrap: str, interval_s: float, config: Mapping[str, object] | None = None
    ) -> None:
        self.history = History(3600_000)
        self._config = {**(config or {}), "bootstrap.servers": bootstrap}
        self._interval_s = interval_s
        self.loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _start(self) -> None:
        client = ConsoleClient(self._config)
        self._runner = web.AppRunner(build_app(client, self.history, self._interval_s))
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    def wait_for_samples(self, count: int, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.history.samples < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the console took {count} samples: {self.history.samples}")
            time.sleep(0.05)

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)


@contextlib.contextmanager
def running_console(
    bootstrap: str, interval_s: float = 0.3, config: Mapping[str, object] | None = None
) -> Iterator[RunningConsole]:
    """`config`: client keys beyond the bootstrap servers (security settings, say)."""
    console = RunningConsole(bootstrap, interval_s, config)
    thread = threading.Thread(target=console.run, name="console", daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(console._start(), console.loop).result(30)
    try:
        yield console
    finally:
        console.stop()
        thread.join(30)
        console.loop.close()
