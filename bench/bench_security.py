"""Security's costs, measured against plaintext in the same run (prints numbers, asserts none).

- produce throughput, 1 KiB records (confluent-kafka, acks=1, linger 5 ms), and consume
  throughput (kcat, librdkafka in C, so the client is not the ceiling) over PLAINTEXT, SSL and
  SASL_SSL (SCRAM-SHA-256) listeners of one broker process, with the broker's CPU seconds
  per GB beside each rate; plus produce from riverlog's connection (pre-encoded ~1 MB
  requests), whose TLS records are full 16 KiB where librdkafka's are ~2 KiB: the broker
  pays per TLS record (one `SSL_read` each), see docs/field-notes.md. Median of ROUNDS runs
  in alternating order. On a machine shared with other work, read the CPU columns;
- TLS handshakes per second: sequential connect + handshake + close from one client, with
  the broker's CPU milliseconds per handshake;
- the authorizer's cost per request: pipelined single-record Produce requests (riverlog's
  connection, 64 in flight) to a broker without an authorizer and to one with the ACL
  authorizer holding 1,000 ACLs (literal, prefixed, on other topics and principals), both
  brokers up at once, AUTHZ_ROUNDS alternating runs, with the broker's CPU microseconds per
  request (`bench/callgrind_requests.py --authorizer` counts the same in instructions);
- `suites` (only when named): librdkafka produce over TLS 1.3 listeners limited to one
  suite each (AES-256-GCM, AES-128-GCM, ChaCha20-Poly1305) next to plaintext, with the
  broker's and the client's CPU seconds per GB.

Brokers are their own processes (`riverlog server`). Targets (issue 23): TLS produce >= 70%
and TLS consume >= 40% of plaintext; the authorizer costs <= 10% of the small-request rate.
`bench_security.py [throughput] [authorizer] [suites]`; the first two by default, about
three minutes (SECONDS, PRODUCE_BYTES, ROUNDS below).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench_harness import cpu_seconds
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from riverlog.client.connection import Connection
from riverlog.client.security import ClientSecurity
from riverlog.metadata.store import EmbeddedStore
from riverlog.protocol import messages as m
from riverlog.protocol.records.v2 import Record, encode_batch
from riverlog.security import acl, authorization, scram_credentials
from riverlog.security.acl_store import AclCache
from riverlog.security.authorizer import Authorizer
from riverlog.security.dev_certs import DevCerts, write_dev_certs
from riverlog.security.rules import NoTopics

PRODUCE_BYTES = 96 * 1024 * 1024
SIZE = 1024
SECONDS = 4.0
RECORDS_PER_REQUEST = 1000
"""1 KiB records per pre-encoded Produce request: within `message.max.bytes` (1 MB)."""
ROUNDS = 3
AUTHZ_ROUNDS = 6
JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-secret";'


@contextlib.contextmanager
def broker(data_dir: Path, settings: dict[str, str]) -> Iterator[tuple[int, dict[str, int]]]:
    """A broker process; (pid, listener → port)."""
    names = [item.split("://")[0] for item in settings["listeners"].split(",")]
    ports = {name: _free_port() for name in names}
    listeners = ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items())
    args = [
        sys.executable,
        "-m",
        "riverlog",
        "server",
        "--data-dir",
        str(data_dir),
        "--override",
        f"listeners={listeners}",
    ]
    for key, value in settings.items():
        if key != "listeners":
            args += ["--override", f"{key}={value}"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if re.search(rb"listening on", line):
                break
        else:
            raise RuntimeError("the broker did not start")
        yield proc.pid, ports
    finally:
        proc.terminate()
        proc.wait(30)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def client_config(listener: str, port: int, certs: DevCerts) -> dict[str, str]:
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": listener}
    if "SSL" in listener:
        conf["ssl.ca.location"] = str(certs.ca)
    if listener.startswith("SASL"):
        conf |= {
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "bench",
            "sasl.password": "bench-secret",
        }
    return conf


def produce(conf: dict[str, str], topic: str) -> float:
    producer = Producer(
        {
            **conf,
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "acks": 1,
            "queue.buffering.max.kbytes": 1 << 20,
        }
    )
    value = b"x" * SIZE
    count = PRODUCE_BYTES // SIZE
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.001)
    producer.flush(120)
    return time.perf_counter() - start


def consume(conf: dict[str, str], topic: str) -> float:
    kcat = shutil.which("kcat")
    assert kcat is not None, "kcat is installed by ./dev setup"
    options = [
        a
        for k, v in conf.items()
        if k != "bootstrap.servers"
        for a in ("-X", f"{k.replace('sasl.mechanism', 'sasl.mechanisms')}={v}")
    ]
    start = time.perf_counter()
    done = subprocess.run(
        [
            kcat,
            "-C",
            "-b",
            conf["bootstrap.servers"],
            "-t",
            topic,
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-q",
            "-X",
            "fetch.max.bytes=52428800",
            "-X",
            "max.partition.fetch.bytes=10485760",
            "-X",
            "queued.max.messages.kbytes=1048576",
            "-f",
            "%S\n",
            *options,
        ],
        capture_output=True,
        timeout=300,
        check=True,
    )
    elapsed = time.perf_counter() - start
    assert done.stdout.count(b"\n") == PRODUCE_BYTES // SIZE
    return elapsed


def _security(listener: str, certs: DevCerts) -> ClientSecurity:
    props = {"security.protocol": listener}
    if "SSL" in listener:
        props["ssl.ca.location"] = str(certs.ca)
    if listener.startswith("SASL"):
        props |= {
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "bench",
            "sasl.password": "bench-secret",
        }
    return ClientSecurity.from_config(props)


def produce_full_records(port: int, security: ClientSecurity, topic: str) -> float:
    """PRODUCE_BYTES as pre-encoded ~1 MB Produce requests (1 KiB records), 4 in flight, on
    riverlog's connection: its TLS writes are full 16 KiB TLS records, where librdkafka writes
    one per buffer segment (~2 KiB). What the broker pays per TLS record shows in the gap."""

    async def run() -> float:
        conn = await Connection.open("127.0.0.1", port, security=security)
        now = int(time.time() * 1000)
        batch = encode_batch(
            [Record(i, now, None, b"x" * SIZE) for i in range(RECORDS_PER_REQUEST)]
        )
        request = m.ProduceRequest(
            acks=1,
            timeout_ms=30000,
            topic_data=[
                m.ProduceRequest.TopicProduceData(
                    name=topic,
                    partition_data=[m.ProduceRequest.PartitionProduceData(index=0, records=batch)],
                )
            ],
        )
        start = time.perf_counter()
        try:
            pending: set[asyncio.Future[object]] = set()
            for _ in range(PRODUCE_BYTES // (RECORDS_PER_REQUEST * SIZE)):
                if len(pending) >= 4:
                    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    for f in done:
                        response = f.result()
                        assert isinstance(response, m.ProduceResponse)
                        assert response.responses[0].partition_responses[0].error_code == 0
                pending.add(asyncio.ensure_future(conn.send(request)))
            await asyncio.gather(*pending)
            return time.perf_counter() - start
        finally:
            await conn.close()

    return asyncio.run(run())


LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL")
WAYS = ("produce", "produce, full TLS records", "consume")


def throughput(certs: DevCerts, work: Path) -> None:
    """Each listener in turn, ROUNDS times in alternating order (later runs pay less for
    fresh memory, see docs/field-notes.md); the median of each."""
    settings = {
        "listeners": ",".join(LISTENERS),
        "ssl.keystore.location": str(certs.broker),
        "ssl.truststore.location": str(certs.ca),
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "num.partitions": "1",
    }
    data = work / "throughput"
    data.mkdir()
    store = EmbeddedStore(data / "riverlog-metadata.json")
    credential = scram_credentials.make("SCRAM-SHA-256", "bench-secret", 4096)
    store.create(
        scram_credentials.user_path("bench"),
        f'{{"version":1,"config":{{"SCRAM-SHA-256":"{credential.to_text()}"}}}}'.encode(),
    )
    store.close()
    with broker(data, settings) as (pid, ports):
        rates: dict[tuple[str, str], list[tuple[float, float]]] = {}
        mb = PRODUCE_BYTES / 1e6
        for round_ in range(ROUNDS):
            for listener in LISTENERS if round_ % 2 == 0 else LISTENERS[::-1]:
                conf = client_config(listener, ports[listener], certs)
                topic, full = (f"bench-{listener.lower()}-{uuid.uuid4().hex[:6]}" for _ in "ab")
                admin = AdminClient(conf)
                for future in admin.create_topics(
                    [NewTopic(t, 1, 1) for t in (topic, full)]
                ).values():
                    future.result(30)
                del admin  # not outliving its broker
                security = _security(listener, certs)
                for what in WAYS:
                    before = cpu_seconds(pid)
                    if what == "produce":
                        elapsed = produce(conf, topic)
                    elif what == "consume":
                        elapsed = consume(conf, topic)
                    else:
                        elapsed = produce_full_records(ports[listener], security, full)
                    cpu = cpu_seconds(pid) - before
                    rates.setdefault((what, listener), []).append((mb / elapsed, cpu / mb * 1000))
        print(
            f"1 KiB records, median of {ROUNDS}{'':<12}{'MB/s':>8}{'vs plaintext':>14}"
            f"{'broker CPU s/GB':>17}{'vs plaintext':>14}"
        )
        for what in WAYS:
            plain_rate, plain_cpu = _medians(rates[(what, "PLAINTEXT")])
            for listener in LISTENERS:
                rate, cpu = _medians(rates[(what, listener)])
                label = f"{what} over {listener}"
                print(
                    f"{label:<40}{rate:>8.1f}{rate / plain_rate:>13.0%}"
                    f"{cpu:>17.2f}{plain_cpu / cpu:>13.0%}"
                )
        handshakes(pid, ports["SSL"], certs)


def _medians(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(r for r, _ in runs), statistics.median(c for _, c in runs)


def handshakes(pid: int, port: int, certs: DevCerts) -> None:
    context = ssl.create_default_context(cafile=str(certs.ca))
    count = 0
    before = cpu_seconds(pid)
    start = time.perf_counter()
    while time.perf_counter() - start < SECONDS:
        with (
            socket.create_connection(("127.0.0.1", port)) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1"),
        ):
            count += 1
    elapsed = time.perf_counter() - start
    cpu = cpu_seconds(pid) - before
    print(
        f"TLS handshakes/s (one client, sequential): {count / elapsed:.0f}; "
        f"broker CPU {cpu / count * 1000:.2f} ms per handshake"
    )


def _produce_request(topic: str) -> m.ProduceRequest:
    batch = encode_batch([Record(0, int(time.time() * 1000), None, b"x" * 100)])
    return m.ProduceRequest(
        acks=1,
        timeout_ms=5000,
        topic_data=[
            m.ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[m.ProduceRequest.PartitionProduceData(index=0, records=batch)],
            )
        ],
    )


async def _request_rate(port: int, topic: str) -> int:
    conn = await Connection.open("127.0.0.1", port)
    request = _produce_request(topic)
    done = 0
    deadline = time.perf_counter() + SECONDS
    in_flight: set[asyncio.Future[object]] = set()
    try:
        while time.perf_counter() < deadline:
            while len(in_flight) < 64:
                in_flight.add(asyncio.ensure_future(conn.send(request)))
            finished, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            for f in finished:
                response = f.result()
                assert isinstance(response, m.ProduceResponse)
                assert response.responses[0].partition_responses[0].error_code == 0
            done += len(finished)
        await asyncio.gather(*in_flight)
    finally:
        await conn.close()
    return done


def install_acls(cache: AclCache) -> None:
    """1,000 ACLs of other principals and topics (every tenth prefixed), and the bench's
    (ANONYMOUS may do anything on `bench*` topics and the cluster)."""
    for i in range(1000):
        kind = acl.PREFIXED if i % 10 == 0 else acl.LITERAL
        cache.add(
            acl.Pattern(acl.TOPIC, f"other-{i}", kind),
            [acl.Entry(f"User:u{i}", "*", acl.WRITE, acl.ALLOW)],
        )
    for pattern in (
        acl.Pattern(acl.TOPIC, "bench", acl.PREFIXED),
        acl.Pattern(acl.CLUSTER, acl.CLUSTER_NAME),
    ):
        cache.add(pattern, [acl.Entry("User:ANONYMOUS", "*", acl.ALL_OPERATION, acl.ALLOW)])


def check_cost_us() -> float:
    """The authorization wrapper's own cost per single-topic Produce request, in process
    (the best of repeated timings: what the check costs, without the machine's noise)."""
    authorizer = Authorizer({}, EmbeddedStore(None))
    install_acls(authorizer.cache)
    response = m.ProduceResponse(responses=[])

    def handler(ctx: Any) -> m.ProduceResponse:
        return response

    guarded = authorization.wrap(m.ProduceRequest.API_KEY, handler, authorizer, NoTopics())
    conn = SimpleNamespace(principal="User:ANONYMOUS", client_host="127.0.0.1", subject=None)
    ctx = SimpleNamespace(
        connection=conn, request=SimpleNamespace(body=_produce_request("bench-1")), version=9
    )
    runs = 20_000
    bare = min(timeit.repeat(lambda: handler(ctx), number=runs, repeat=15))
    checked = min(timeit.repeat(lambda: guarded(ctx), number=runs, repeat=15))
    return (checked - bare) / runs * 1e6


def authorizer_cost(work: Path) -> None:
    """Two brokers up at once, without and with the ACL authorizer; AUTHZ_ROUNDS runs of
    SECONDS each in alternating order (one run each swings ±30% on a shared machine);
    medians of the rate and of the broker's CPU per request."""
    with contextlib.ExitStack() as stack:
        targets = []
        for authorized in (False, True):
            data = work / f"authz-{authorized}"
            data.mkdir()
            settings = {"listeners": "PLAINTEXT", "num.partitions": "1"}
            if authorized:
                settings |= {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}
                store = EmbeddedStore(data / "riverlog-metadata.json")
                install_acls(AclCache(store))
                store.close()
            pid, ports = stack.enter_context(broker(data, settings))
            topic = f"bench-{uuid.uuid4().hex[:6]}"
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"})
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
            del admin  # not outliving its broker
            targets.append((pid, ports["PLAINTEXT"], topic))
        runs: list[list[tuple[float, float]]] = [[], []]
        for round_ in range(AUTHZ_ROUNDS):
            for which in (0, 1) if round_ % 2 == 0 else (1, 0):
                pid, port, topic = targets[which]
                before = cpu_seconds(pid)
                count = asyncio.run(_request_rate(port, topic))
                cpu = cpu_seconds(pid) - before
                runs[which].append((count / SECONDS, cpu / count * 1e6))
    (plain, plain_cpu), (authz, authz_cpu) = (_medians(r) for r in runs)
    print(
        f"single-record Produce requests/s, median of {AUTHZ_ROUNDS}: no authorizer "
        f"{plain:,.0f} ({plain_cpu:.0f} µs broker CPU each); ACL authorizer with 1,000 ACLs "
        f"{authz:,.0f} ({authz_cpu:.0f} µs each): rate {authz / plain:.0%} of plaintext, "
        f"CPU +{(authz_cpu - plain_cpu) / plain_cpu:.1%} per request"
    )
    check = check_cost_us()
    print(
        f"authorization check per Produce request (in process, best of 15): {check:.2f} µs "
        f"= {check / plain_cpu:.1%} of the broker's CPU per request without an authorizer"
    )


SUITES = {
    "AES256": "TLS_AES_256_GCM_SHA384",
    "AES128": "TLS_AES_128_GCM_SHA256",
    "CHACHA": "TLS_CHACHA20_POLY1305_SHA256",
}
"""TLS 1.3 suites compared by `suites`, each on its own listener."""
SUITE_ROUNDS = 5


def suites(certs: DevCerts, work: Path) -> None:
    """librdkafka produce (1 KiB records) over TLS 1.3 listeners limited to one suite each
    (`listener.name.<name>.ssl.cipher.suites`) next to plaintext, alternating order: the
    broker's and the client's CPU seconds per GB (the client's: this process, librdkafka's
    threads included), median of SUITE_ROUNDS."""
    names = ["PLAINTEXT", *SUITES]
    settings = {
        "listeners": ",".join(names),
        "listener.security.protocol.map": ",".join(
            ["PLAINTEXT:PLAINTEXT", *(f"{n}:SSL" for n in SUITES)]
        ),
        "ssl.keystore.location": str(certs.broker),
        "num.partitions": "1",
        **{f"listener.name.{n.lower()}.ssl.cipher.suites": s for n, s in SUITES.items()},
    }
    data = work / "suites"
    data.mkdir()
    gb = PRODUCE_BYTES / 1e9
    with broker(data, settings) as (pid, ports):
        runs: dict[str, list[tuple[float, float, float]]] = {n: [] for n in names}
        for round_ in range(SUITE_ROUNDS):
            for name in names if round_ % 2 == 0 else names[::-1]:
                conf = client_config("PLAINTEXT" if name == "PLAINTEXT" else "SSL", 0, certs)
                conf["bootstrap.servers"] = f"127.0.0.1:{ports[name]}"
                topic = f"bench-{name.lower()}-{uuid.uuid4().hex[:6]}"
                admin = AdminClient(conf)
                admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
                del admin
                broker_before, client_before = cpu_seconds(pid), time.process_time()
                elapsed = produce(conf, topic)
                broker_cpu = cpu_seconds(pid) - broker_before
                client_cpu = time.process_time() - client_before
                runs[name].append((gb * 1000 / elapsed, broker_cpu / gb, client_cpu / gb))
        print(
            f"librdkafka produce, 1 KiB records, median of {SUITE_ROUNDS}{'':<4}{'MB/s':>8}"
            f"{'broker CPU s/GB':>17}{'client CPU s/GB':>17}"
        )
        for name in names:
            rate, broker_cpu, client_cpu = (
                statistics.median(r[i] for r in runs[name]) for i in range(3)
            )
            label = "plaintext" if name == "PLAINTEXT" else SUITES[name]
            print(f"{label:<46}{rate:>8.1f}{broker_cpu:>17.2f}{client_cpu:>17.2f}")


def main() -> None:
    """`bench_security.py [throughput|authorizer|suites]`: the first two, or those named."""
    parts = sys.argv[1:] or ["throughput", "authorizer"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        certs = write_dev_certs(work / "certs")
        if "throughput" in parts:
            throughput(certs, work)
        if "authorizer" in parts:
            authorizer_cost(work)
        if "suites" in parts:
            suites(certs, work)


if __name__ == "__main__":
    main()
