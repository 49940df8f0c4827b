"""An in-process broker for development and test suites: no ZooKeeper, a free loopback port.

    from riverlog.embedded import broker

    with broker() as b:
        producer = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap_servers})

The broker runs its own event loop on a background thread, so it
works from synchronous code and from inside another event loop alike. With no `data_dir` it
uses a temporary directory removed on exit. `broker_fixture` is a ready pytest fixture.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

from riverlog.server.broker import Broker
from riverlog.server.config import BrokerConfig


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The broker's loop: asyncio's selector loop, whose `loop.sendfile` on a transport is
    `os.sendfile` (zero copy). uvloop has no native sendfile for transports — asyncio then
    falls back to reading the file through Python — so it is not used for the broker."""
    return asyncio.new_event_loop()


class EmbeddedBroker:
    """A running broker on its own thread; `stop()` (or leaving the `with`) shuts it down."""

    def __init__(self, data_dir: Path, overrides: Mapping[str, str]) -> None:
        props = {
            "broker.id": "0",
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(data_dir),
            "group.initial.rebalance.delay.ms": "0",
            **overrides,
        }
        self.config = BrokerConfig.from_properties(props)
        self.loop = new_event_loop()
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="riverlog-embedded", daemon=True)
        self.broker: Broker | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.broker = Broker(self.config)
            self.loop.run_until_complete(self.broker.start())
        except BaseException as e:  # reported to the starting thread
            self._error = e
            self._started.set()
            return
        self._started.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.broker.stop())
        self.loop.close()

    def start(self, timeout_s: float = 30.0) -> EmbeddedBroker:
        self._thread.start()
        if not self._started.wait(timeout_s):
            raise TimeoutError("the embedded broker did not start")
        if self._error is not None:
            raise RuntimeError(f"the embedded broker failed to start: {self._error}") from (
                self._error
            )
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=30)

    @property
    def bootstrap_servers(self) -> str:
        assert self.broker is not None
        return self.broker.bootstrap_servers

    def call(self, fn: object) -> None:
        """Run a callable on the broker's loop thread (for tests that poke at internals)."""
        assert callable(fn)
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                done.set()

        self.loop.call_soon_threadsafe(run)
        done.wait(30)


@contextlib.contextmanager
def broker(
    data_dir: Path | str | None = None, overrides: Mapping[str, str] | None = None
) -> Iterator[EmbeddedBroker]:
    """Start a broker on 127.0.0.1 (free port); stop it and clean up on exit."""
    temporary = data_dir is None
    directory = Path(tempfile.mkdtemp(prefix="riverlog-")) if data_dir is None else Path(data_dir)
    running = EmbeddedBroker(directory, overrides or {}).start()
    try:
        yield running
    finally:
        running.stop()
        if temporary:
            shutil.rmtree(directory, ignore_errors=True)
