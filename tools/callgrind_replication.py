"""Deterministic CPU counts of replication: callgrind instructions per broker role.

Starts a real ZooKeeper and three brokers on loopback — broker 1 (the leader of an RF=3
partition) and broker 2 (one of its followers) under `valgrind --tool=callgrind
--instr-atstart=no`, broker 3 plain — plus, for the one-broker figure, a broker without
ZooKeeper under callgrind. A Python client (riverlog's own connection, so requests are the
same bytes every run) then drives fixed workloads, one in flight, acks=all:

- `bulk`: MIB requests, each one uncompressed batch of 1,000 1 KiB records (RF=3; counts
  are per MiB of batches);
- `tiny`: REQUESTS single-record requests (RF=3), and the same against the lone broker.

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
import os
import re
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


def batch(records: int, size: int) -> bytes:
    now = int(time.time() * 1000)
    value = b"x" * size
    return encode_batch([Record(i, now, None, value) for i in range(records)])


async def produce(address: str, data: bytes, count: int) -> None:
    host, port = address.rsplit(":", 1)
    conn = await Connection.open(host, int(port), client_id="callgrind")
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


def measured(pids: dict[str, int], label: str, work: object) -> None:
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
    args = parser.parse_args()
    if os.environ.get("PYTHONHASHSEED") != "0":
        print("note: set PYTHONHASHSEED=0 for repeatable counts", file=sys.stderr)
    out = args.out or Path(tempfile.mkdtemp(prefix="riverlog-callgrind-"))
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("callgrind.*"):
        old.unlink()
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
                prefix=valgrind(out, f"b{i}") if i < 3 else (),
            )
            for i in (1, 2, 3)
        }
        lone_port = free_port()
        lone = subprocess.Popen(
            [
                *valgrind(out, "lone"),
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
            asyncio.run(produce(lone_address, small, 20))
            pids = {
                "leader": brokers[1].proc.pid,  # type: ignore[union-attr]
                "follower": brokers[2].proc.pid,  # type: ignore[union-attr]
            }
            lone_pids = {"lone": lone.pid}
            for pid in [*pids.values(), lone.pid]:
                control(pid, "-i", "on")
            measured(pids, "bulk", lambda: asyncio.run(produce(leader, big, args.mib)))
            measured(pids, "tiny", lambda: asyncio.run(produce(leader, small, args.requests)))
            measured(
                lone_pids, "tiny", lambda: asyncio.run(produce(lone_address, small, args.requests))
            )
        finally:
            for b in brokers.values():
                b.stop(600)
            lone.terminate()
            lone.wait(600)
            zookeeper.stop()
    mib = args.mib * len(big) / (1 << 20)
    roles = {"leader": ("b1", pids["leader"]), "follower": ("b2", pids["follower"])}
    report(out, roles, mib, args)
    report(out, {"one broker": ("lone", lone_pids["lone"])}, mib, args)
    print(f"dumps in {out}")


def report(
    out: Path, roles: dict[str, tuple[str, int]], mib: float, args: argparse.Namespace
) -> None:
    for role, (name, pid) in roles.items():
        found = dumps(out, name, pid)
        for label, per in (("bulk", mib), ("tiny", args.requests)):
            if label not in found:
                continue
            unit = "MiB" if label == "bulk" else "request"
            count = total(found[label])
            print(f"{role:>10} {label}: {count / per:14,.0f} instructions per {unit}")
            print(top(found[label], args.top))


if __name__ == "__main__":
    main()
