#!/usr/bin/env python3
"""Protocol fuzzer: mutated client frames against a broker process, counting what it did.

Seeds are the frames real clients sent (`bench/fuzz_corpus/`, from
`tools/capture_fuzz_corpus.py`: confluent-kafka, kafka-python, aiokafka, kcat, riverlog's
client, and the controller's own inter-broker requests). Worker processes run atheris
(libFuzzer's mutator), coverage-guided by riverlog's request codec instrumented in the
worker: each input is decoded locally (a codec exception other than the protocol's own
errors is a bug, counted) and sent to the broker as one frame, pipelined in groups of
`--pipeline` frames on `--connections` connections per worker, each group followed by an
ApiVersions "sentinel" whose answer says the broker has handled everything before it.
One frame in 200 gets a random size prefix.

Counted as handled: frames answered, and frames before the sentinel's answer that have no
answer (acks=0); when the broker closes the connection, only the frames answered plus the
one that closed it — an undercount, never an overcount. The run reports frames/s, broker
CPU seconds per 1,000 frames, broker exceptions (tracebacks and ERROR lines in its log),
crashes (the process gone) and its resident memory (VmRSS sampled, VmHWM at the end)
against `RSS_BOUND_MIB`, the bound the hostile-client tests hold.

    .venv/bin/python bench/bench_fuzz.py [--frames 1000000] [--workers 3] [--pipeline 1]
                                          [--connections 32] [--no-coverage]

Exit status 0 only with 0 broker exceptions, 0 crashes, 0 codec exceptions and the RSS
bound held. `tests/integration/test_protocol_fuzz.py` runs a short version.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import re
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench_harness import cpu_seconds

if TYPE_CHECKING:  # imported late: the worker instruments the codec first
    from riverlog.protocol.framing import FrameReader

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "bench" / "fuzz_corpus"
RSS_BOUND_MIB = 400
SENTINEL_ID = 0x5E5E5E5E
STALL_S = 2.0
"""A group not settled in this long (a long poll the mutation asked for): reconnect."""
LISTENING = re.compile(rb"listening on (127\.0\.0\.1:\d+)")
EXCEPTION_LINE = re.compile(r"Traceback|\bERROR\b|Exception in callback")


# --- the worker: atheris in this process, frames to the broker ----------------------------


class Lane:
    """One connection of a worker: a group of frames in flight at most."""

    def __init__(self) -> None:
        self.sock: socket.socket | None = None
        self.reader: FrameReader | None = None
        self.group = 0
        self.answered = 0
        self.deadline = 0.0


class Sender:
    """Pipelines frames to the broker over `connections` lanes and settles each group with
    a sentinel, counting what the broker handled (see the module docstring)."""

    def __init__(self, bootstrap: str, pipeline: int, connections: int) -> None:
        from riverlog.protocol.framing import FrameReader, encode_request
        from riverlog.protocol.messages import ApiVersionsRequest

        self.frame_reader = FrameReader

        host, port = bootstrap.rsplit(":", 1)
        self.address = (host, int(port))
        self.pipeline = pipeline
        self.sentinel = encode_request(ApiVersionsRequest(), 0, SENTINEL_ID, "sentinel")
        self.free = collections.deque(Lane() for _ in range(connections))
        self.selector = selectors.DefaultSelector()
        self.group: list[bytes] = []
        self.rng = random.Random(os.getpid())
        self.sent = self.handled = self.answered = self.closed = self.stalled = 0
        self.codec_errors: list[str] = []

    def add(self, body: bytes) -> None:
        if self.rng.randrange(200) == 0:  # a lying size prefix
            size = self.rng.choice([-1, 0, len(body) + 1, len(body) * 3, 2**31 - 1])
        else:
            size = len(body)
        self.group.append(struct.pack(">i", size) + body)
        if len(self.group) >= self.pipeline:
            self.flush()

    def flush(self) -> None:
        group, self.group = self.group, []
        if not group:
            return
        while not self.free:
            self._poll(0.05)
        lane = self.free.popleft()
        self.sent += len(group)
        try:
            if lane.sock is None:
                lane.sock = socket.create_connection(self.address, timeout=STALL_S)
            lane.sock.sendall(b"".join(group) + self.sentinel)
        except OSError:
            self.closed += 1
            self.handled += 1  # the frame that made the broker close (at least one)
            self._drop(lane)
            return
        lane.reader = self.frame_reader()
        lane.group, lane.answered = len(group), 0
        lane.deadline = time.monotonic() + STALL_S
        self.selector.register(lane.sock, selectors.EVENT_READ, lane)

    def finish(self) -> None:
        self.flush()
        while self.selector.get_map():
            self._poll(0.05)

    def _poll(self, timeout_s: float) -> None:
        for key, _ in self.selector.select(timeout_s):
            lane = key.data
            assert lane.sock is not None and lane.reader is not None
            try:
                data = lane.sock.recv(1 << 20)
            except OSError:
                data = b""
            if not data:  # closed by the broker: the answered frames and the one it closed on
                self.closed += 1
                self._settled(lane, lane.answered + 1, close=True)
                continue
            for frame in lane.reader.feed(data):
                if len(frame) >= 4 and struct.unpack_from(">i", frame)[0] == SENTINEL_ID:
                    self._settled(lane, lane.group, close=False)
                    break
                lane.answered += 1
                self.answered += 1
        now = time.monotonic()
        for key in list(self.selector.get_map().values()):
            lane = key.data
            if now > lane.deadline:  # a long poll: count what was answered, reconnect
                self.stalled += 1
                self._settled(lane, lane.answered, close=True)

    def _settled(self, lane: Lane, handled: int, *, close: bool) -> None:
        self.handled += min(handled, lane.group)
        assert lane.sock is not None
        self.selector.unregister(lane.sock)
        if close:
            self._drop(lane)
        else:
            self.free.append(lane)

    def _drop(self, lane: Lane) -> None:
        if lane.sock is not None:
            lane.sock.close()
        lane.sock = None
        self.free.append(lane)


def run_worker(args: argparse.Namespace) -> int:
    import atheris

    # Coverage of the codec's readers guides the mutations; the generated message classes
    # are too big to instrument quickly.
    guided = [
        "riverlog.protocol.framing",
        "riverlog.protocol.primitives",
        "riverlog.protocol.varint",
        "riverlog.protocol.api",
        "riverlog.protocol.records",
    ]
    if args.coverage:
        with atheris.instrument_imports(include=guided):
            from riverlog.protocol import framing
    else:  # mutations of the seeds only (starts in a second, not a minute)
        from riverlog.protocol import framing

    from riverlog.protocol.exceptions import ProtocolError

    sender = Sender(args.bootstrap, args.pipeline, args.connections)
    stats = Path(args.stats)
    calls = 0

    def report() -> None:
        lines = [
            f"sent={sender.sent} handled={sender.handled} answered={sender.answered} "
            f"closed={sender.closed} stalled={sender.stalled}"
        ]
        lines += [f"codec error: {error}" for error in sender.codec_errors[:20]]
        stats.write_text("\n".join(lines) + "\n")

    def one_input(data: bytes) -> None:
        nonlocal calls
        try:
            framing.decode_request(data)
        except ProtocolError:
            pass
        except Exception as e:  # the broker would choke on it too
            sender.codec_errors.append(f"{type(e).__name__}: {e} for {data[:64].hex()}")
        sender.add(data)
        calls += 1
        if calls == args.runs:  # libFuzzer exits the process after its last run
            sender.finish()
            report()
        elif calls % 2000 == 0:
            report()

    atheris.Setup(
        [
            sys.argv[0],
            f"-runs={args.runs}",
            f"-seed={args.seed}",
            "-max_len=65536",
            "-print_final_stats=0",
            "-print_pcs=0",
            "-reload=0",
            "-keep_seed=1",
            args.corpus,
        ],
        one_input,
    )
    atheris.Fuzz()
    return 0


# --- the run: broker, workers, measurements ----------------------------------------------


@dataclass
class Memory:
    rss_kib: int
    hwm_kib: int


def memory(pid: int) -> Memory:
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0])
    return Memory(fields["VmRSS"], fields["VmHWM"])


def start_broker(directory: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    log_path = directory / "broker.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "riverlog",
                "server",
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
                str(directory / "data"),
                "--override",
                "group.initial.rebalance.delay.ms=0",
            ],
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
        )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        found = LISTENING.search(line)
        if found:
            return proc, found.group(1).decode(), log_path
        if not line:
            break
    proc.kill()
    raise RuntimeError(f"the broker did not start; see {log_path}")


def seed_topics(bootstrap: str) -> None:
    """The topics and groups the captured frames name, with some records to fetch."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("corpus", 2, 1)])["corpus"].result(10)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(200):
        producer.produce("corpus", b"seed %d" % i, key=b"k%d" % (i % 7))
    producer.flush(10)


def run(args: argparse.Namespace) -> int:
    directory = Path(tempfile.mkdtemp(prefix="riverlog-fuzz-"))
    proc, bootstrap, log_path = start_broker(directory)
    workers: list[subprocess.Popen[bytes]] = []
    try:
        seed_topics(bootstrap)
        baseline = memory(proc.pid)
        cpu_before = cpu_seconds(proc.pid)
        runs = args.frames // args.workers + 1
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        start = time.perf_counter()
        for i in range(args.workers):
            corpus = directory / f"corpus-{i}"
            shutil.copytree(CORPUS, corpus)
            workers.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "--worker",
                        "--bootstrap",
                        bootstrap,
                        "--runs",
                        str(runs),
                        "--seed",
                        str(args.seed + i),
                        "--pipeline",
                        str(args.pipeline),
                        "--connections",
                        str(args.connections),
                        "--corpus",
                        str(corpus),
                        "--stats",
                        str(directory / f"stats-{i}"),
                        "--coverage" if args.coverage else "--no-coverage",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env=env,
                )
            )
        peak_rss = baseline.rss_kib
        while any(w.poll() is None for w in workers) and proc.poll() is None:
            peak_rss = max(peak_rss, memory(proc.pid).rss_kib)
            time.sleep(0.5)  # sampling interval, not synchronisation
        elapsed = time.perf_counter() - start
        totals: dict[str, int] = {}
        codec_errors: list[str] = []
        for i, w in enumerate(workers):
            w.wait(timeout=60)
            stats = directory / f"stats-{i}"
            for line in (stats.read_text() if stats.exists() else "").splitlines():
                if line.startswith("codec error: "):
                    codec_errors.append(line)
                for key, value in re.findall(r"(\w+)=(\d+)", line):
                    totals[key] = totals.get(key, 0) + int(value)
        crashed = proc.poll() is not None
        end = memory(proc.pid) if not crashed else Memory(0, 0)
        cpu = cpu_seconds(proc.pid) - cpu_before if not crashed else float("nan")
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    log_text = log_path.read_text(errors="replace")
    exceptions = [line for line in log_text.splitlines() if EXCEPTION_LINE.search(line)]
    handled = totals.get("handled", 0)
    peak_mib = max(end.hwm_kib, peak_rss) / 1024
    print(
        f"frames sent {totals.get('sent', 0):,}, handled by the broker {handled:,} "
        f"(answered {totals.get('answered', 0):,}, connections closed by the broker "
        f"{totals.get('closed', 0):,}, stalled groups {totals.get('stalled', 0):,})"
    )
    print(
        f"{elapsed:.1f} s, {handled / elapsed:,.0f} frames/s handled; broker CPU "
        f"{cpu:.1f} s = {1000 * cpu / max(handled, 1):.3f} s per 1,000 frames"
    )
    print(
        f"broker RSS: {baseline.rss_kib / 1024:.0f} MiB at start, peak {peak_mib:.0f} MiB "
        f"(VmHWM), bound {RSS_BOUND_MIB} MiB"
    )
    print(
        f"broker exceptions: {len(exceptions)}; crashes: {int(crashed)}; "
        f"codec exceptions in the workers: {len(codec_errors)}"
    )
    for line in (exceptions + codec_errors)[:20]:
        print(f"  {line}")
    if not exceptions and not crashed:
        shutil.rmtree(directory, ignore_errors=True)
    else:
        print(f"kept {directory} (broker log: {log_path})")
    ok = not exceptions and not crashed and not codec_errors and peak_mib < RSS_BOUND_MIB
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--pipeline", type=int, default=1)
    parser.add_argument("--connections", type=int, default=32, help="per worker")
    parser.add_argument("--seed", type=int, default=20261125)
    parser.add_argument(
        "--coverage",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="guide mutations by coverage of the codec (instrumenting it "
        "takes the workers ~1 minute to start)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--runs", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--stats", help=argparse.SUPPRESS)
    args = parser.parse_args()
    return run_worker(args) if args.worker else run(args)


if __name__ == "__main__":
    raise SystemExit(main())
