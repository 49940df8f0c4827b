"""Instructions a broker process spends per small request, counted by callgrind (deterministic
where timings on this shared VM are not): metrics off vs on, or any broker overrides.

A `riverlog server` runs under `valgrind --tool=callgrind --instr-atstart=no`
(PYTHONHASHSEED=0). After a warm-up, instrumentation is switched on, N Metadata requests for
no topics (32 in flight, as bench_operations.py sends them) are sent and the counters dumped,
then 3N more and dumped again: (I(3N) - I(N)) / 2N is the cost of one request with start-up,
warm-up and the fixed part of a run cancelled out. About a minute per variant.

    python bench/callgrind_requests.py                      # metrics off vs on
    python bench/callgrind_requests.py --produce            # Produce requests instead
    python bench/callgrind_requests.py --single --fill 40000  # 1-record acks=all, 1 in flight
    python bench/callgrind_requests.py --requests 2000 --override KEY=VALUE ...
    python bench/callgrind_requests.py --produce --records 1 --in-flight 64 --authorizer

`--produce` sends Produce requests (acks=1) of one batch of `--records` records (100 by
default) of 100 bytes to a one-partition topic instead of Metadata requests. `--single` sends
what bench_broker.py's "1 in flight" row does: Produce v9 requests of one 1-byte record,
acks=all, from an idempotent producer (InitProducerId first, sequences counted on), one in
flight; `--fill K` first writes K such records (no idempotence, 32 in flight,
uninstrumented) to the topic, as bench_broker.py's earlier rows leave it. `--authorizer`
compares a broker without an authorizer with one running the ACL authorizer over the 1,000
ACLs of bench_security.py (the bench's ANONYMOUS principal allowed on `bench*` topics and the
cluster), as bench_security.py's authorizer row does.

Prints instructions per request per variant; `--keep DIR` keeps the callgrind files there
(`callgrind_annotate DIR/callgrind.out.<pid>.2` shows where they go).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from riverlog.client.admin import AsyncAdmin
from riverlog.client.connection import connect_any
from riverlog.devcluster import free_port
from riverlog.metadata.store import EmbeddedStore
from riverlog.protocol.api import ApiMessage
from riverlog.protocol.messages import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    MetadataRequest,
    ProduceRequest,
)
from riverlog.protocol.records.v2 import Record, encode_batch
from riverlog.security.acl_store import AclCache

IN_FLIGHT = 32
TOPIC = "bench-load"
SINGLE_VERSION = 9  # what librdkafka 2.x sends


def _produce_request(records: int) -> ProduceRequest:
    now = int(time.time() * 1000)
    batch = encode_batch([Record(i, now, None, b"x" * 100) for i in range(records)])
    partition = ProduceRequest.PartitionProduceData(index=0, records=batch)
    topic = ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[partition])
    return ProduceRequest(acks=1, timeout_ms=30_000, topic_data=[topic])


async def _send(bootstrap: str, count: int, options: argparse.Namespace) -> None:
    conn = await connect_any(bootstrap, client_id="callgrind-bench")
    request: ApiMessage = (
        _produce_request(options.records)
        if options.produce
        else MetadataRequest(topics=[], allow_auto_topic_creation=False)
    )
    in_flight = options.in_flight
    try:
        for _ in range(count // in_flight):
            await asyncio.gather(*(conn.send(request, timeout_s=600) for _ in range(in_flight)))
    finally:
        await conn.close()


class _Idempotent:
    """One idempotent producer's id and next sequence, kept across the harness's phases."""

    def __init__(self) -> None:
        self.producer_id = -1
        self.epoch = -1
        self.sequence = 0

    def request(self) -> ProduceRequest:
        batch = encode_batch(
            [Record(0, int(time.time() * 1000), None, b"x")],
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            base_sequence=self.sequence,
        )
        self.sequence += 1
        partition = ProduceRequest.PartitionProduceData(index=0, records=batch)
        topic = ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[partition])
        return ProduceRequest(acks=-1, timeout_ms=30_000, topic_data=[topic])


async def _send_single(bootstrap: str, count: int, producer: _Idempotent) -> None:
    """`count` single-record acks=all requests, each answered before the next is sent."""
    conn = await connect_any(bootstrap, client_id="callgrind-bench")
    try:
        if producer.producer_id < 0:
            init = InitProducerIdRequest(
                transactional_id=None, transaction_timeout_ms=-1, producer_id=-1, producer_epoch=-1
            )
            answer = await conn.send(init, timeout_s=600)
            assert isinstance(answer, InitProducerIdResponse) and answer.error_code == 0
            producer.producer_id, producer.epoch = answer.producer_id, answer.producer_epoch
        for _ in range(count):
            await conn.send(producer.request(), SINGLE_VERSION, timeout_s=600)
    finally:
        await conn.close()


async def _fill(bootstrap: str, records: int) -> None:
    """`records` single-record requests without idempotence, 32 in flight."""
    now = int(time.time() * 1000)
    partition = ProduceRequest.PartitionProduceData(
        index=0, records=encode_batch([Record(0, now, None, b"x")])
    )
    topic = ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[partition])
    request = ProduceRequest(acks=-1, timeout_ms=30_000, topic_data=[topic])
    conn = await connect_any(bootstrap, client_id="callgrind-fill")
    try:
        for _ in range(records // IN_FLIGHT):
            sends = (conn.send(request, SINGLE_VERSION, timeout_s=600) for _ in range(IN_FLIGHT))
            await asyncio.gather(*sends)
    finally:
        await conn.close()


def _control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def _wait_dump(out_dir: Path, pid: int, n: int, timeout_s: float = 300) -> int:
    """Instructions (Ir) in the n-th dump of `pid`, once the file is complete."""
    path = out_dir / f"callgrind.out.{pid}.{n}"
    deadline = time.monotonic() + timeout_s
    while True:
        if path.exists():
            text = path.read_text(errors="replace")
            found = re.search(r"^totals: (\d+)", text, re.M)
            if found:
                return int(found.group(1))
        if time.monotonic() > deadline:
            raise TimeoutError(f"no dump {path}")
        time.sleep(0.5)


async def _create_topic(bootstrap: str) -> None:
    async with AsyncAdmin({"bootstrap.servers": bootstrap}) as admin:
        await admin.create_topic(TOPIC, 1, 1)


def _with_acls(data_dir: str) -> None:
    """bench_security.py's 1,000 ACLs in the broker's embedded store."""
    from bench_security import install_acls

    store = EmbeddedStore(Path(data_dir) / "riverlog-metadata.json")
    install_acls(AclCache(store))
    store.close()


def measure(
    overrides: list[str], out_dir: Path, options: argparse.Namespace, acls: bool = False
) -> float:
    """Instructions per request of a broker with these `--override`s (and the bench's ACLs
    in its store)."""
    producer = _Idempotent()

    def run(bootstrap: str, count: int) -> None:
        if options.single:
            asyncio.run(_send_single(bootstrap, count, producer))
        else:
            asyncio.run(_send(bootstrap, count, options))

    def prepare(bootstrap: str) -> None:
        if options.produce or options.single:
            asyncio.run(_create_topic(bootstrap))
        if options.fill:
            asyncio.run(_fill(bootstrap, options.fill))
        run(bootstrap, 2 * options.in_flight * 10)  # warm-up

    return per_unit(overrides, out_dir, prepare, run, options.requests, acls=acls)


def per_unit(
    overrides: list[str],
    out_dir: Path,
    prepare: Callable[[str], None],
    run: Callable[[str, int], None],
    units: int,
    acls: bool = False,
) -> float:
    """Instructions a `riverlog server` (with these `--override`s, and the bench's ACLs in
    its store if `acls`) spends per unit of work: `prepare(bootstrap)` runs uninstrumented,
    then `run(bootstrap, N)` and `run(bootstrap, 3N)` are counted and (I(3N) - I(N)) / 2N
    returned."""
    data_dir = tempfile.mkdtemp(prefix="callgrind-broker-")
    if acls:
        _with_acls(data_dir)
    args = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out_dir}/callgrind.out.%p",
        sys.executable,
        "-m",
        "riverlog",
        "server",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data_dir,
    ]
    for o in overrides:
        args += ["--override", o]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            found = re.search(rb"listening on (127\.0\.0\.1:\d+)", line)
            if found:
                bootstrap = found.group(1).decode()
                break
        else:
            raise RuntimeError("the broker did not start")
        prepare(bootstrap)
        _control(proc.pid, "--instr=on")
        _control(proc.pid, "--zero")
        run(bootstrap, units)
        _control(proc.pid, "--dump=n")
        first = _wait_dump(out_dir, proc.pid, 1)
        run(bootstrap, 3 * units)
        _control(proc.pid, "--dump=3n")
        second = _wait_dump(out_dir, proc.pid, 2)
        return (second - first) / (2 * units)
    finally:
        proc.terminate()
        proc.wait(120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1024, help="N (a multiple of in-flight)")
    parser.add_argument("--in-flight", type=int, default=IN_FLIGHT, help="requests at once")
    parser.add_argument("--records", type=int, default=100, help="records per Produce request")
    parser.add_argument(
        "--authorizer", action="store_true", help="no authorizer vs the ACL authorizer"
    )
    parser.add_argument("--override", action="append", default=[], help="KEY=VALUE")
    parser.add_argument("--keep", help="directory for the callgrind files")
    parser.add_argument("--produce", action="store_true", help="Produce requests instead")
    parser.add_argument(
        "--single", action="store_true", help="1-record acks=all idempotent Produce, 1 in flight"
    )
    parser.add_argument("--fill", type=int, default=0, help="records written first (--single)")
    options = parser.parse_args()
    out_dir = Path(options.keep or tempfile.mkdtemp(prefix="callgrind-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    acl_variant = "ACL authorizer"
    if options.authorizer:
        authorizer = "authorizer.class.name=kafka.security.authorizer.AclAuthorizer"
        variants = {"no authorizer": options.override, acl_variant: [*options.override, authorizer]}
    elif options.override:
        variants = {"with overrides": options.override}
    elif options.single:
        variants = {"defaults": []}
    else:
        variants = {
            "metrics off": [],
            "metrics on": [f"metrics.listener=http://127.0.0.1:{free_port()}"],
        }
    results = {}
    for name, overrides in variants.items():
        results[name] = measure(overrides, out_dir, options, acls=name == acl_variant)
        print(f"  {name:<16} {results[name]:10,.0f} instructions per request", flush=True)
    if len(results) == 2:
        (first, off), (second, on) = results.items()
        print(f"  {second} - {first}: {on - off:,.0f} instructions per request ({on / off:.1%})")
    print(f"  callgrind files in {out_dir}")


if __name__ == "__main__":
    main()
