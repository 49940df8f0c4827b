"""A cluster to break on purpose: a ZooKeeper and N `riverlog server` processes placed on test
hosts (`hosts.py`: loopback, or a network namespace each), with the process and disk faults
the fault suite injects and the client-side questions it asks (leaders, ISR, controller).

Faults owned here: SIGKILL / SIGSTOP / SIGCONT / SIGTERM (controlled shutdown) of a broker and
restart on the same port and data; ZooKeeper killed, frozen, restarted; a broker's log dir
filled up (each data dir is its own small tmpfs when `disk_mb` is given and mounting works: a
filler file takes every free byte until released). Network faults belong to the hosts.

Invariants: only processes started here are signalled, by the PID they were started with;
`close` leaves nothing behind (thaws, stops, kills what will not stop, unmounts) and is safe
to call twice and after any failure; questions to the cluster have deadlines.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from riverlog.client.admin import AsyncAdmin
from riverlog.devcluster import BrokerProcess, ZooKeeperServer
from riverlog.testing.hosts import Hosts

FAULT_SETTINGS = {
    "zookeeper.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "3000",
    "controlled.shutdown.retry.backoff.ms": "300",
    "min.insync.replicas": "2",
    "default.replication.factor": "3",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "false",
}
"""Broker settings of the fault runs: RF=3, min ISR 2, short failure detection."""

Layout = dict[int, tuple[int, list[int], list[int]]]
"""partition -> (leader, replicas, isr)"""


class FaultCluster:
    def __init__(
        self,
        directory: Path,
        hosts: Hosts,
        brokers: int = 3,
        settings: dict[str, str] | None = None,
        disk_mb: int | None = None,
    ) -> None:
        self.directory = directory
        self.hosts = hosts
        zk_host, zk_prefix, zk_port = hosts.place("zk")
        self.zookeeper = ZooKeeperServer(
            directory / "zookeeper", zk_port, host=zk_host, prefix=zk_prefix
        )
        self.settings = {**FAULT_SETTINGS, **(settings or {})}
        self.brokers: dict[int, BrokerProcess] = {}
        for i in range(1, brokers + 1):
            host, prefix, port = hosts.place(f"b{i}")
            zk = f"{self.zookeeper.connect}/riverlog"
            self.brokers[i] = BrokerProcess(
                i, directory, zk, self.settings, port, host=host, prefix=prefix
            )
        self.disk_mb = disk_mb
        self.mounted: list[Path] = []
        self.zk_frozen = False
        self.last_unhealthy = ""
        """Why `isr_full` last said no."""

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.address for b in self.brokers.values())

    # -- life ------------------------------------------------------------------------------

    def start(self) -> FaultCluster:
        try:
            self.zookeeper.start()
            for broker in self.brokers.values():
                if self.disk_mb is not None:
                    self._mount(broker.data_dir)
                broker.start()
        except BaseException:
            self.close()
            raise
        return self

    def _mount(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.disk_mb}m", "tmpfs", str(path)],
            check=True,
            capture_output=True,
            timeout=30,
        )
        self.mounted.append(path)

    def close(self) -> None:
        self.thaw_zookeeper()
        for broker in self.brokers.values():
            if broker.running:
                try:
                    broker.stop(20)
                except (subprocess.TimeoutExpired, OSError):
                    broker.kill()
        self.zookeeper.stop()
        for path in self.mounted:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)
        self.mounted.clear()

    # -- process faults --------------------------------------------------------------------

    def kill(self, broker_id: int) -> None:
        self.brokers[broker_id].kill()

    def terminate(self, broker_id: int, timeout_s: float = 60.0) -> None:
        """SIGTERM: a controlled shutdown, waited for (SIGKILL after `timeout_s`)."""
        broker = self.brokers[broker_id]
        try:
            broker.stop(timeout_s)
        except subprocess.TimeoutExpired:
            broker.kill()

    def freeze(self, broker_id: int) -> None:
        self.brokers[broker_id].freeze()

    def thaw(self, broker_id: int) -> None:
        broker = self.brokers[broker_id]
        if broker.running and broker.frozen:
            broker.thaw()

    def start_broker(self, broker_id: int) -> None:
        self.brokers[broker_id].start(60)

    def restart_stopped(self, attempts: int = 3) -> list[str]:
        """Start every broker that is not running (one that exited by itself too), trying
        each up to `attempts` times; what went wrong on the way (a broker that exited while
        starting: the last line of its log), RuntimeError if one never started."""
        trouble = []
        for broker in self.brokers.values():
            if broker.proc is not None and broker.proc.poll() is not None:
                trouble.append(f"broker {broker.broker_id} had exited by itself")
                broker.proc = None
            for attempt in range(attempts):
                if broker.running:
                    break
                try:
                    broker.start(60)
                except RuntimeError:
                    last = broker.log_file.read_text(errors="replace").strip().splitlines()[-3:]
                    trouble.append(f"broker {broker.broker_id} failed to start: {' | '.join(last)}")
                    if attempt == attempts - 1:
                        raise
        return trouble

    def kill_zookeeper(self) -> None:
        self.thaw_zookeeper()
        if self.zookeeper.proc is not None:
            self.zookeeper.proc.kill()
            self.zookeeper.proc.wait(10)
            self.zookeeper.proc = None

    def restart_zookeeper(self) -> None:
        if self.zookeeper.proc is None:
            self.zookeeper.start()

    def freeze_zookeeper(self) -> None:
        if self.zookeeper.proc is not None:
            os.kill(self.zookeeper.proc.pid, signal.SIGSTOP)
            self.zk_frozen = True

    def thaw_zookeeper(self) -> None:
        if self.zk_frozen and self.zookeeper.proc is not None:
            os.kill(self.zookeeper.proc.pid, signal.SIGCONT)
        self.zk_frozen = False

    # -- disk faults -----------------------------------------------------------------------

    def fill_disk(self, broker_id: int) -> int:
        """Take every free byte of the broker's log dir; the bytes taken."""
        filler = self.brokers[broker_id].data_dir / "zz-filler"
        taken = 0
        with open(filler, "ab", buffering=0) as f:
            for size in (1 << 20, 4096, 1):  # big writes first, then the last crumbs
                try:
                    while True:
                        taken += f.write(b"\0" * size)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
        return taken

    def release_disk(self, broker_id: int) -> None:
        (self.brokers[broker_id].data_dir / "zz-filler").unlink(missing_ok=True)

    # -- asking the cluster ----------------------------------------------------------------

    def ask(
        self,
        question: Callable[[AsyncAdmin], object],
        timeout_s: float = 10.0,
        bootstrap: str | None = None,
    ) -> object:
        """`question` answered by an admin client (of `bootstrap`, by default every broker)."""

        async def run() -> object:
            admin = AsyncAdmin(
                {
                    "bootstrap.servers": bootstrap or self.bootstrap_servers,
                    "request.timeout.ms": "3000",
                }
            )
            try:
                result = question(admin)
                return await result if asyncio.iscoroutine(result) else result
            finally:
                await admin.close()

        return asyncio.run(asyncio.wait_for(run(), timeout_s))

    def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None:
        self.ask(lambda a: a.create_topic(name, partitions, 3, configs), 30)
        self.wait_until(lambda: self.isr_full(name), 60, f"topic {name}'s ISRs full")

    def layout(self, topic: str, bootstrap: str | None = None) -> Layout:
        infos = self.ask(lambda a: a.describe_topics([topic]), bootstrap=bootstrap)
        assert isinstance(infos, list)
        return {p.partition: (p.leader, list(p.replicas), list(p.isr)) for p in infos[0].partitions}

    def controller(self) -> int:
        described = self.ask(lambda a: a.describe_cluster())
        return int(described.controller)  # type: ignore[attr-defined]

    def isr_full(self, topic: str) -> bool:
        try:
            layout = self.layout(topic)
        except Exception as e:  # any failure to answer is "not healthy yet"
            self.last_unhealthy = f"no answer: {e!r}"
            return False
        full = bool(layout) and all(
            leader >= 0 and len(isr) == len(replicas) for leader, replicas, isr in layout.values()
        )
        if not full:
            self.last_unhealthy = f"partition -> (leader, replicas, isr): {layout}"
        return full

    def views(self, topic: str) -> dict[int, str]:
        """Each broker's own answer about `topic` (its metadata cache), or why it gave none."""
        seen = {}
        for broker_id, broker in self.brokers.items():
            try:
                seen[broker_id] = str(self.layout(topic, bootstrap=broker.address))
            except Exception as e:  # the answer is the error
                seen[broker_id] = repr(e)
        return seen

    @staticmethod
    def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> float:
        """Poll `check` until true; the seconds it took. TimeoutError after `timeout_s`."""
        start = time.monotonic()
        while not check():
            if time.monotonic() - start > timeout_s:
                raise TimeoutError(f"not within {timeout_s} s: {what}")
            time.sleep(0.1)
        return time.monotonic() - start
