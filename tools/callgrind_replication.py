"""Deterministic CPU counts of replication: callgrind instructions per broker role.

Starts a real ZooKeeper and three brokers on loopback — broker 1 (the leader of an RF=3
partition) and broker 2 (one of its followers) under `valgrind --tool=callgrind
--instr-atstart=no`, broker 3 plain — plus, for the one-broker figure, a broker without
ZooKeeper under callgrind. A Python client (riverlog's own connection, so requests are the
same bytes every run) then drives fixed workloads, one in flight, acks=all:

- `bulk`: MIB requests, each one uncompressed batch of 1,000 1 KiB records (RF=3; counts
  are per MiB of batches);
- `tiny`: REQUESTS single-record requests (RF=3), and the same against the lone broker;
- the `bulk` workload against the lone broker too, so that leader + 2 followers per MiB
  compares with one broker per MiB (issue 29's ratio, user space only).

With `--syscalls` the brokers run without valgrind and `strace -c -f` is attached to each
measured broker around each workload instead: system calls per MiB and per request by name
(`epoll_wait` returns are the event loop's wake-ups). strace slows the brokers, so timing
(fetches per produce) shifts a little; compare runs made the same way. With `--opcodes` the
brokers run under `tools/opcount.py`, switched on around each workload: bytecodes executed
per Python function, inclusive and self, and calls, per MiB and per request (deterministic
given the same timing; the interpreter's cost by Python function, which callgrind cannot
show — C functions the bytecode calls are not counted).

Instrumentation starts after the warm-up (`callgrind_control -i on`; until then valgrind
runs the brokers uninstrumented, so start-up is quicker and not counted), and around each
workload the counters are zeroed and dumped (`callgrind_control -z`, `--dump`). Prints
instructions per MiB and per request for each role, and each dump's heaviest functions by
self cost (callgrind_annotate); keeps the dumps under --out for more reading. Timing still
decides a little (how many fetches a follower needs per produce, idle fetches that time
out), so compare runs of the same workload; user-space only — the kernel's side of
sendfile, recv and page-cache writes is not counted.

    PYTHONHASHSEED=0 python tools/callgrind_replication.py --out /tmp/cg
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverlog.client.connection import Connection
from riverlog.devcluster import BrokerProcess, ZooKeeperServer, free_port
from riverlog.protocol.messages import ProduceRequest
from riverlog.protocol.records.v2 import Record, encode_batch

PRODUCE_VERSION = 9  # what librdkafka 2.x sends
TOPIC = "rf3"


def valgrind(out: Path, name: str) -> list[str]:
    return [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out}/callgrind.{name}.%p",
    ]


def control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


class Tracer:
    """`strace -c -f` attached to processes around each workload (`--syscalls`), or the
    opcode counter switched on and off (`--opcodes`)."""

    def __init__(self, out: Path, opcodes: bool) -> None:
        self.out = out
        self.opcodes = opcodes
        self.running: list[subprocess.Popen[bytes]] = []
        self.pids: list[int] = []

    def start(self, pids: dict[str, int], label: str) -> None:
        if self.opcodes:
            self.pids = list(pids.values())
            for pid in self.pids:
                os.kill(pid, signal.SIGUSR1)
            time.sleep(1.0)  # handled (the loop wakes for it)
            return
        for role, pid in pids.items():
            path = self.out / f"strace.{role.replace(' ', '_')}.{label}"
            self.running.append(
                subprocess.Popen(
                    ["strace", "-c", "-f", "-o", str(path), "-p", str(pid)],
                    stderr=subprocess.DEVNULL,
                )
            )
        time.sleep(1.0)  # attached (strace gives no signal of it)

    def stop(self) -> None:
        for pid in self.pids:
            os.kill(pid, signal.SIGUSR2)
        self.pids = []
        for proc in self.running:
            proc.send_signal(signal.SIGINT)
        for proc in self.running:
            proc.wait(60)
        self.running = []


def syscalls(path: Path) -> dict[str, int]:
    """name -> calls, from an `strace -c` summary."""
    counts = {}
    for line in path.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[0][0].isdigit() and not fields[-1].startswith("total"):
            counts[fields[-1]] = int(fields[3])
    return counts


def batch(records: int, size: int) -> bytes:
    now = int(time.time() * 1000)
    value = b"x" * size
    return encode_batch([Record(i, now, None, value) for i in range(records)])


async def produce(address: str, data: bytes, count: int) -> None:
    host, port = address.rsplit(":", 1)
    conn = await Connection.open(host, int(port), client_id="callgrind", timeout_s=600)
    request = ProduceRequest(
        acks=-1,
        timeout_ms=600_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TOPIC,
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=data)],
            )
        ],
    )
    try:
        for _ in range(count):
            response = await conn.send(request, PRODUCE_VERSION)
            code = response.responses[0].partition_responses[0].error_code  # type: ignore[attr-defined]
            assert code == 0, code
    finally:
        await conn.close()


def measured(pids: dict[str, int], label: str, work: object, tracer: Tracer | None) -> None:
    if tracer is not None:
        tracer.start(pids, label)
        try:
            work()  # type: ignore[operator]
        finally:
            tracer.stop()
        return
    for pid in pids.values():
        control(pid, "-z")
    work()  # type: ignore[operator]
    for pid in pids.values():
        control(pid, f"--dump={label}")


def total(dump: Path) -> int:
    text = dump.read_text(errors="replace")
    found = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
    return int(found.group(1)) if found else 0


def dumps(out: Path, name: str, pid: int) -> dict[str, Path]:
    """label -> dump file of one process (callgrind names dumps <file>.<n>)."""
    found = {}
    for path in out.glob(f"callgrind.{name}.{pid}.*"):
        head = path.read_text(errors="replace")[:4000]
        label = re.search(r"^desc: Trigger: [^\n]*?(bulk|tiny)", head, re.M)
        if label:
            found[label.group(1)] = path
    return found


def top(dump: Path, n: int) -> str:
    out = subprocess.run(
        ["callgrind_annotate", "--threshold=100", str(dump)], capture_output=True, text=True
    ).stdout
    rows = [line for line in out.splitlines() if re.match(r"^\s*[\d,]+ \(", line)]
    return "\n".join(rows[1 : n + 1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=8, help="1 MiB requests (bulk)")
    parser.add_argument("--requests", type=int, default=200, help="single-record requests")
    parser.add_argument("--out", type=Path, default=None, help="keep the dumps here")
    parser.add_argument("--top", type=int, default=25, help="functions shown per dump")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--syscalls", action="store_true", help="count system calls (strace -c), not instructions"
    )
    mode.add_argument(
        "--opcodes", action="store_true", help="count bytecodes per Python function (opcount.py)"
    )
    args = parser.parse_args()
    if os.environ.get("PYTHONHASHSEED") != "0":
        print("note: set PYTHONHASHSEED=0 for repeatable counts", file=sys.stderr)
    out = args.out or Path(tempfile.mkdtemp(prefix="riverlog-callgrind-"))
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("callgrind.*"), *out.glob("strace.*"), *out.glob("opcount.*")]:
        old.unlink()
    tracer = Tracer(out, args.opcodes) if args.syscalls or args.opcodes else None
    os.environ["OPCOUNT_OUT"] = str(out / "opcount")
    opcount = [sys.executable, str(Path(__file__).with_name("opcount.py"))] if args.opcodes else []

    def wrapped(name: str) -> list[str]:
        return valgrind(out, name) if tracer is None else opcount

    big, small = batch(1000, 1024), batch(1, 1)  # max.message.bytes: ~1 MB
    with tempfile.TemporaryDirectory(prefix="riverlog-callgrind-") as tmp:
        directory = Path(tmp)
        zookeeper = ZooKeeperServer(directory / "zookeeper").start()
        settings = {
            "zookeeper.session.timeout.ms": "60000",
            "replica.lag.time.max.ms": "600000",
        }
        brokers = {
            i: BrokerProcess(
                i,
                directory,
                zookeeper.connect,
                settings,
                prefix=wrapped(f"b{i}") if i < 3 else (),
            )
            for i in (1, 2, 3)
        }
        lone_port = free_port()
        lone = subprocess.Popen(
            [
                *wrapped("lone"),
                sys.executable,
                "-m",
                "riverlog",
                "server",
                "--listen",
                f"127.0.0.1:{lone_port}",
                "--data-dir",
                str(directory / "lone"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            starting = [threading.Thread(target=b.start, args=(900,)) for b in brokers.values()]
            for thread in starting:
                thread.start()
            for thread in starting:
                thread.join()
            bootstrap = ",".join(b.address for b in brokers.values())
            admin = AdminClient({"bootstrap.servers": bootstrap})
            deadline = time.monotonic() + 900
            while len(admin.list_topics(timeout=60).brokers) < 3:  # all registered
                assert time.monotonic() < deadline, "brokers missing from metadata"
                time.sleep(0.5)
            admin.create_topics(
                [NewTopic(TOPIC, 1, replica_assignment=[[1, 2, 3]])], operation_timeout=600
            )[TOPIC].result(900)
            lone_admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{lone_port}"})
            lone_admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(900)
            deadline = time.monotonic() + 900
            while True:
                meta = admin.list_topics(TOPIC, timeout=60).topics[TOPIC].partitions[0]
                if meta.leader == 1 and len(meta.isrs) == 3:
                    break
                assert time.monotonic() < deadline, "no full ISR"
                time.sleep(0.5)
            leader = brokers[1].address
            lone_address = f"127.0.0.1:{lone_port}"
            # warm up: imports, caches, the fetchers' connections
            asyncio.run(produce(leader, big, 2))
            asyncio.run(produce(leader, small, 20))
            asyncio.run(produce(lone_address, big, 2))
            asyncio.run(produce(lone_address, small, 20))
            pids = {
                "leader": brokers[1].proc.pid,  # type: ignore[union-attr]
                "follower": brokers[2].proc.pid,  # type: ignore[union-attr]
            }
            lone_pids = {"lone": lone.pid}
            if tracer is None:
                for pid in [*pids.values(), lone.pid]:
                    control(pid, "-i", "on")
            for label, data, count in (("bulk", big, args.mib), ("tiny", small, args.requests)):
                measured(
                    pids, label, lambda d=data, n=count: asyncio.run(produce(leader, d, n)), tracer
                )
                measured(
                    lone_pids,
                    label,
                    lambda d=data, n=count: asyncio.run(produce(lone_address, d, n)),
                    tracer,
                )
        finally:
            for b in brokers.values():
                b.stop(600)
            lone.terminate()
            lone.wait(600)
            zookeeper.stop()
    mib = args.mib * len(big) / (1 << 20)
    if args.syscalls:
        report_syscalls(out, ["leader", "follower", "lone"], mib, args)
        return
    if args.opcodes:
        report_opcodes(out, {**pids, "lone": lone.pid}, mib, args)
        return
    roles = {"leader": ("b1", pids["leader"]), "follower": ("b2", pids["follower"])}
    per_mib = report(out, roles, mib, args)
    per_mib.update(report(out, {"one broker": ("lone", lone_pids["lone"])}, mib, args))
    if len(per_mib) == 3:
        rf3 = per_mib["leader"] + 2 * per_mib["follower"]
        print(
            f"bulk, RF=3 (leader + 2 followers) {rf3:,.0f} instructions per MiB, one broker "
            f"{per_mib['one broker']:,.0f}: {rf3 / per_mib['one broker']:.2f}x"
        )
    print(f"dumps in {out}")


def report_opcodes(out: Path, roles: dict[str, int], mib: float, args: argparse.Namespace) -> None:
    """Bytecodes per MiB / per request by function: inclusive (with what it calls), self,
    calls (dumps 0 and 1 of each process: bulk, tiny)."""
    for role, pid in roles.items():
        for n, (label, per) in enumerate((("bulk", mib), ("tiny", args.requests))):
            path = out / f"opcount.{pid}.{n}"
            deadline = time.monotonic() + 60
            while not path.exists() and time.monotonic() < deadline:  # written by the broker
                time.sleep(0.2)
            found = json.loads(path.read_text())
            unit = "MiB" if label == "bulk" else "request"
            print(f"{role:>10} {label}: {found['total'] / per:12,.0f} bytecodes per {unit}")
            rows = sorted(found["rows"].items(), key=lambda kv: -kv[1][1])[: args.top]
            for name, (own, inclusive, calls) in rows:
                print(f"{inclusive / per:12,.0f} {own / per:10,.0f} {calls / per:8.2f}  {name}")


def report_syscalls(out: Path, roles: list[str], mib: float, args: argparse.Namespace) -> None:
    for role in roles:
        for label, per in (("bulk", mib), ("tiny", args.requests)):
            path = out / f"strace.{role}.{label}"
            if not path.exists():
                continue
            unit = "MiB" if label == "bulk" else "request"
            counts = syscalls(path)
            shown = ", ".join(
                f"{name} {n / per:.1f}"
                for name, n in sorted(counts.items(), key=lambda kv: -kv[1])
                if n / per >= 0.05
            )
            print(f"{role:>10} {label}: {sum(counts.values()) / per:.1f} system calls per {unit}")
            print(f"{'':>10}   {shown}")


def report(
    out: Path, roles: dict[str, tuple[str, int]], mib: float, args: argparse.Namespace
) -> dict[str, float]:
    """Prints each role's counts; returns its instructions per MiB (bulk)."""
    per_mib = {}
    for role, (name, pid) in roles.items():
        found = dumps(out, name, pid)
        for label, per in (("bulk", mib), ("tiny", args.requests)):
            if label not in found:
                continue
            unit = "MiB" if label == "bulk" else "request"
            count = total(found[label])
            if label == "bulk":
                per_mib[role] = count / per
            print(f"{role:>10} {label}: {count / per:14,.0f} instructions per {unit}")
            print(top(found[label], args.top))
    return per_mib


if __name__ == "__main__":
    main()
