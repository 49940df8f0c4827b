"""The fault suite's workload: `riverlog verifiable-producer` and `verifiable-consumer --verbose`
processes writing their JSON event lines to files, and the final read that the history
checker compares them with.

Producers send values "K.N" (K the producer's number) with keys cycling over 30 values (so
every partition gets records all the time, which the recovery measure relies on), acks=all,
idempotent with unbounded retries unless `idempotent=False` (then plain acks=all with
retries, which may duplicate). Consumers share one group and commit after every poll.

Invariants: `stop` ends producers with SIGTERM (they flush and print `shutdown_complete`) and
waits for them before the final read; every process started here is stopped by PID, killed
if it does not stop within its deadline, also when the run failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from riverlog.client.admin_requests import leader_offsets
from riverlog.client.consumer import AsyncConsumer
from riverlog.testing.history import History, Record

LATEST = -1


def read_events(path: Path) -> list[dict[str, Any]]:
    """A tool's event lines (anything else it printed is skipped)."""
    events = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            with contextlib.suppress(json.JSONDecodeError):
                events.append(json.loads(line))
    return events


class Workload:
    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        directory: Path,
        *,
        producers: int = 2,
        consumers: int = 2,
        throughput: int = 200,
        idempotent: bool = True,
    ) -> None:
        self.bootstrap = bootstrap_servers
        self.topic = topic
        self.directory = directory
        self.group = f"{topic}-readers"
        self.producer_count, self.consumer_count = producers, consumers
        self.throughput = throughput
        self.idempotent = idempotent
        self.producers: dict[str, subprocess.Popen[bytes]] = {}
        self.consumers: dict[str, subprocess.Popen[bytes]] = {}
        self.final: list[Record] = []
        self._read_to: dict[str, int] = {}
        self._last_ack: dict[int, int] = {}
        self._seen: set[tuple[int, int]] = set()

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        out = open(self.directory / f"{name}.jsonl", "wb")  # noqa: SIM115  (the child owns it)
        err = open(self.directory / f"{name}.stderr", "wb")  # noqa: SIM115
        with out, err:
            return subprocess.Popen(
                [sys.executable, "-m", "riverlog", *args],
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
            )

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "producer.properties"
        settings = {
            "acks": "all",
            "retries": "2147483647",
            "linger.ms": "5",
            "request.timeout.ms": "5000",
            "delivery.timeout.ms": "120000",
            "enable.idempotence": str(self.idempotent).lower(),
        }
        config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        for i in range(1, self.consumer_count + 1):
            self.consumers[f"consumer-{i}"] = self._spawn(
                f"consumer-{i}",
                [
                    "verifiable-consumer",
                    "--bootstrap-server",
                    self.bootstrap,
                    "--topic",
                    self.topic,
                    "--group-id",
                    self.group,
                    "--verbose",
                    "--session-timeout",
                    "10000",
                ],
            )
        for i in range(1, self.producer_count + 1):
            self.producers[f"producer-{i}"] = self._spawn(
                f"producer-{i}",
                [
                    "verifiable-producer",
                    "--bootstrap-server",
                    self.bootstrap,
                    "--topic",
                    self.topic,
                    "--value-prefix",
                    str(i),
                    "--repeating-keys",
                    "30",
                    "--throughput",
                    str(self.throughput),
                    "--command-config",
                    str(config),
                ],
            )
        deadline = time.monotonic() + 60
        for name in [*self.producers, *self.consumers]:
            while not any(e.get("name") == "startup_complete" for e in self.events(name)):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} did not start")
                time.sleep(0.05)

    def events(self, name: str) -> list[dict[str, Any]]:
        return read_events(self.directory / f"{name}.jsonl")

    def ack_times(self) -> dict[int, list[int]]:
        """partition -> every ack's timestamp (ms), all producers, sorted."""
        times: dict[int, list[int]] = {}
        for name in self.producers:
            for e in self.events(name):
                if e.get("name") == "producer_send_success":
                    times.setdefault(int(e["partition"]), []).append(int(e["timestamp"]))
        return {p: sorted(ts) for p, ts in times.items()}

    def _new_lines(self, name: str) -> list[bytes]:
        """The complete lines `name` wrote since the last call."""
        with open(self.directory / f"{name}.jsonl", "rb") as f:
            f.seek(self._read_to.get(name, 0))
            data = f.read()
        whole = data[: data.rfind(b"\n") + 1]
        self._read_to[name] = self._read_to.get(name, 0) + len(whole)
        return whole.splitlines()

    def last_acks(self) -> dict[int, int]:
        """partition -> the latest ack timestamp (ms) of any producer, read incrementally."""
        for name in self.producers:
            for line in self._new_lines(name):
                if b'"producer_send_success"' in line:
                    e = json.loads(line)
                    p = int(e["partition"])
                    self._last_ack[p] = max(self._last_ack.get(p, 0), int(e["timestamp"]))
        return dict(self._last_ack)

    def stop(self, partitions: int, timeout_s: float = 150.0) -> None:
        """Stop the producers, read every partition back, then stop the consumers once they
        have caught up (or `timeout_s` passed)."""
        _stop_all(self.producers, timeout_s)
        self.final = asyncio.run(asyncio.wait_for(self._final_read(partitions), timeout_s))
        total = len(self.final)
        deadline = time.monotonic() + 30
        while self.consumers and time.monotonic() < deadline and self._consumed() < total:
            time.sleep(0.2)
        _stop_all(self.consumers, 60)

    def _consumed(self) -> int:
        """Distinct (partition, offset) the consumers handed out so far, read incrementally."""
        for name in self.consumers:
            for line in self._new_lines(name):
                if b'"record_data"' in line:
                    e = json.loads(line)
                    self._seen.add((int(e["partition"]), int(e["offset"])))
        return len(self._seen)

    async def _final_read(self, partitions: int) -> list[Record]:
        tps = [(self.topic, p) for p in range(partitions)]
        consumer = AsyncConsumer(
            {
                "bootstrap.servers": self.bootstrap,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        try:
            ends = await leader_offsets(consumer.cluster, tps, LATEST, 200, attempts=50)
            consumer.assign(tps)
            consumer.seek_to_beginning(tps)
            records: list[Record] = []
            while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                for r in await consumer.poll(500):
                    if r.offset < ends[(r.topic, r.partition)]:
                        value = r.value.decode() if r.value is not None else ""
                        records.append(Record(r.partition, r.offset, value))
            return records
        finally:
            await consumer.close()

    def history(self) -> History:
        return History(
            self.topic,
            producers={name: list(self.events(name)) for name in self.producers},
            consumers={name: list(self.events(name)) for name in self.consumers},
            groups=dict.fromkeys(self.consumers, self.group),
            final=self.final,
        )

    def close(self) -> None:
        """Kill whatever is still running (after a failure)."""
        for proc in [*self.producers.values(), *self.consumers.values()]:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def _stop_all(procs: dict[str, subprocess.Popen[bytes]], timeout_s: float) -> None:
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for proc in procs.values():
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
