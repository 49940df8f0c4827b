"""Hostile clients against a broker process: each gets its error code or a closed connection,
the broker's memory stays bounded, and a well-behaved producer keeps working meanwhile.

One broker process serves the module (`max.connections.per.ip` 3000); a confluent-kafka
producer acknowledges records all along (`SteadyProducer`) and every case checks that it
still progresses. Memory is the kernel's view of the broker process (`/proc/<pid>/status`):
the module's last test checks the peak (VmHWM) over everything above stayed under
`RSS_BOUND_MIB` — huge creates, 5,000 connections, 100 MiB frame announcements. Start-up
cases (two brokers on one data dir, bad configs) start brokers of their own.
"""

from __future__ import annotations

import base64
import json
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from riverlog.protocol import error_codes
from riverlog.protocol import messages as m
from riverlog.protocol.records.v2 import Record, encode_batch
from tests.integration.conftest import BrokerProcess, start_broker
from tests.integration.hostile import SteadyProducer, address, call, closed_by_peer, rss

RSS_BOUND_MIB = 400
"""The broker's peak resident memory over this module's hostile cases (it idles near
80 MiB; 5,000 connections and 64 announced 100 MiB frames must not take it past this)."""
PER_IP_LIMIT = 3000
HUGE = 2**31 - 1
STEADY_TOPIC = "steady"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir = tmp_path_factory.mktemp("hostile") / "data"
    running = start_broker(
        data_dir,
        f"max.connections.per.ip={PER_IP_LIMIT}",
        "group.initial.rebalance.delay.ms=0",
    )
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def steady(broker: BrokerProcess) -> Iterator[SteadyProducer]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(STEADY_TOPIC, 1, 1)])[STEADY_TOPIC].result(10)
    producer = SteadyProducer(broker.bootstrap_servers, STEADY_TOPIC)
    assert producer.progresses(), "the well-behaved producer does not start"
    yield producer
    producer.stop()


def _produce_request(topic: str, values: list[bytes]) -> m.ProduceRequest:
    now = int(time.time() * 1000)
    batch = encode_batch([Record(i, now, None, v) for i, v in enumerate(values)])
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


def _read_all(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader"})
    consumer.assign([CkTopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(values) < count and time.monotonic() < deadline:
        for msg in consumer.consume(100, 0.5):
            if msg.error() is None:
                values.append(msg.value() or b"")
    consumer.close()
    return values


# --- resource bounds -------------------------------------------------------------------


def test_huge_creates_are_refused_before_any_work(
    broker: BrokerProcess, steady: SteadyProducer
) -> None:
    bootstrap = broker.bootstrap_servers
    before = rss(broker.proc.pid)
    violation = error_codes.POLICY_VIOLATION.code
    for validate_only in (True, False):
        for topics in (
            [
                m.CreateTopicsRequest.CreatableTopic(
                    name="huge", num_partitions=HUGE, replication_factor=1
                )
            ],
            [
                m.CreateTopicsRequest.CreatableTopic(
                    name=f"many-{i}", num_partitions=5000, replication_factor=1
                )
                for i in range(3)
            ],
        ):
            request = m.CreateTopicsRequest(
                topics=topics, timeout_ms=5000, validate_only=validate_only
            )
            response = call(bootstrap, request, 7)
            assert isinstance(response, m.CreateTopicsResponse)
            assert [t.error_code for t in response.topics] == [violation] * len(topics)
            assert response.topics[0].error_message == (
                "Unable to perform excessively large batch operation."
            )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("grows", 1, 1)])["grows"].result(10)
    grow = m.CreatePartitionsRequest(
        topics=[m.CreatePartitionsRequest.CreatePartitionsTopic(name="grows", count=HUGE)],
        timeout_ms=5000,
    )
    response = call(bootstrap, grow, 3)
    assert isinstance(response, m.CreatePartitionsResponse)
    assert response.results[0].error_code == violation
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([NewTopic("wide", 1, 10000)])["wide"].result(10)
    assert refused.value.args[0].code() == error_codes.INVALID_REPLICATION_FACTOR.code
    after = rss(broker.proc.pid)
    assert after.hwm_kib - before.rss_kib < 32 * 1024, (before, after)
    assert steady.progresses()


@pytest.mark.parametrize(
    ("partitions", "message"),
    [
        ("0", "The partitions must be greater than 0"),
        (str(HUGE), "Unable to perform excessively large batch operation."),
    ],
)
def test_topics_cli_refuses_bad_partition_counts(
    broker: BrokerProcess, partitions: str, message: str
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "riverlog",
            "topics",
            "--bootstrap-server",
            broker.bootstrap_servers,
            "--create",
            "--topic",
            "typo",
            "--partitions",
            partitions,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_frame_above_socket_request_max_bytes_is_closed_at_once(
    broker: BrokerProcess, steady: SteadyProducer
) -> None:
    with socket.create_connection(address(broker.bootstrap_servers)) as sock:
        sock.sendall(struct.pack(">i", 100 * 1024 * 1024 + 1))
        assert closed_by_peer(sock, 10)
    with socket.create_connection(address(broker.bootstrap_servers)) as sock:
        sock.sendall(struct.pack(">i", -1))
        assert closed_by_peer(sock, 10)
    assert steady.progresses()


def test_100_mib_announcements_allocate_only_what_arrives(
    broker: BrokerProcess, steady: SteadyProducer
) -> None:
    """64 connections each announce a 100 MiB frame (the limit) and send 256 KiB of it:
    the broker holds what arrived, not 6.4 GiB."""
    before = rss(broker.proc.pid)
    socks = []
    for _ in range(64):
        sock = socket.create_connection(address(broker.bootstrap_servers))
        sock.sendall(struct.pack(">i", 100 * 1024 * 1024) + bytes(256 * 1024))
        socks.append(sock)
    try:
        assert steady.progresses()
        during = rss(broker.proc.pid)
        assert during.rss_kib - before.rss_kib < 96 * 1024, (before, during)
        assert not any(closed_by_peer(s, 0.01) for s in socks)  # kept: within the limit
    finally:
        for sock in socks:
            sock.close()
    assert steady.progresses()


def test_5000_connections_are_bounded_per_ip(broker: BrokerProcess, steady: SteadyProducer) -> None:
    before = rss(broker.proc.pid)
    socks = [socket.create_connection(address(broker.bootstrap_servers)) for _ in range(5000)]
    try:
        closed = sum(closed_by_peer(s, 0.002) for s in socks)
        deadline = time.monotonic() + 30  # the broker may not have seen them all yet
        while closed < 5000 - PER_IP_LIMIT and time.monotonic() < deadline:
            closed = sum(closed_by_peer(s, 0.002) for s in socks)
        assert 5000 - PER_IP_LIMIT <= closed < 5000 - PER_IP_LIMIT + 50
        during = rss(broker.proc.pid)
        assert during.rss_kib - before.rss_kib < 160 * 1024, (before, during)
        assert steady.progresses()  # its connections were there first
    finally:
        for sock in socks:
            sock.close()
    # The slots are free again.
    response = call(broker.bootstrap_servers, m.ApiVersionsRequest(), 0)
    assert isinstance(response, m.ApiVersionsResponse) and response.error_code == 0


def test_idle_connections_are_closed(tmp_path: Path) -> None:
    running = start_broker(tmp_path / "data", "connections.max.idle.ms=500")
    try:
        with socket.create_connection(address(running.bootstrap_servers)) as sock:
            sock.sendall(struct.pack(">i", 1000) + b"partial")  # a slow, idle client
            assert closed_by_peer(sock, 10)
    finally:
        running.stop()


def test_queued_max_request_bytes_serves_requests_in_turn(tmp_path: Path) -> None:
    """With a 256 KiB pool, big requests still get answered, one budget at a time, and the
    pool is not leaked: later requests are served too."""
    running = start_broker(tmp_path / "data", "queued.max.request.bytes=262144")
    try:
        admin = AdminClient({"bootstrap.servers": running.bootstrap_servers})
        admin.create_topics([NewTopic("pooled", 1, 1)])["pooled"].result(10)
        request = _produce_request("pooled", [bytes(200 * 1024)] * 4)
        for _ in range(5):
            response = call(running.bootstrap_servers, request, 7)
            assert isinstance(response, m.ProduceResponse)
            assert response.responses[0].partition_responses[0].error_code == 0
        producer = Producer({"bootstrap.servers": running.bootstrap_servers})
        for i in range(200):
            producer.produce("pooled", bytes(10_000) + b"%d" % i)
        assert producer.flush(20) == 0
        assert len(_read_all(running.bootstrap_servers, "pooled", 220)) == 220
    finally:
        running.stop()


def test_metadata_by_topic_id_before_v12_closes_the_connection(
    broker: BrokerProcess, steady: SteadyProducer
) -> None:
    """Regression (found by the fuzzer): Metadata v10-11 with a null topic name made the
    broker fail to encode its answer, with a traceback."""
    by_id = [m.MetadataRequest.MetadataRequestTopic(name=None, topic_id=uuid.uuid4())]
    for version in (10, 11):
        with pytest.raises(ConnectionError):
            call(broker.bootstrap_servers, m.MetadataRequest(topics=by_id), version)
    response = call(broker.bootstrap_servers, m.MetadataRequest(topics=by_id), 12)
    assert isinstance(response, m.MetadataResponse)
    assert response.topics[0].error_code == error_codes.UNKNOWN_TOPIC_ID.code
    log = (broker.data_dir.parent / f"{broker.data_dir.name}.broker.log").read_text()
    assert "Traceback" not in log
    assert steady.progresses()


# --- internal topics and fencing -------------------------------------------------------


def test_produce_to_consumer_offsets_is_refused(
    broker: BrokerProcess, steady: SteadyProducer
) -> None:
    bootstrap = broker.bootstrap_servers
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "victims", "enable.auto.commit": False}
    )
    consumer.commit(offsets=[CkTopicPartition(STEADY_TOPIC, 0, 3)], asynchronous=False)
    response = call(bootstrap, _produce_request("__consumer_offsets", [b"garbage"]), 9)
    assert isinstance(response, m.ProduceResponse)
    answer = response.responses[0].partition_responses[0]
    assert answer.error_code == error_codes.INVALID_TOPIC_EXCEPTION.code
    assert answer.error_message == "Cannot append to internal topic __consumer_offsets"
    committed = consumer.committed([CkTopicPartition(STEADY_TOPIC, 0)], timeout=10)
    assert committed[0].offset == 3
    consumer.close()
    assert steady.progresses()


def _controller_epoch(broker: BrokerProcess) -> int:
    stored = json.loads((broker.data_dir / "riverlog-metadata.json").read_text())
    return int(base64.b64decode(stored["/controller_epoch"]["data"]))


def _stop_replica(controller_epoch: int, broker_epoch: int, topic: str) -> m.StopReplicaRequest:
    return m.StopReplicaRequest(
        controller_id=0,
        controller_epoch=controller_epoch,
        broker_epoch=broker_epoch,
        topic_states=[
            m.StopReplicaRequest.StopReplicaTopicState(
                topic_name=topic,
                partition_states=[
                    m.StopReplicaRequest.StopReplicaPartitionState(
                        partition_index=0, leader_epoch=-2, delete_partition=True
                    )
                ],
            )
        ],
    )


def test_forged_controller_requests_change_nothing(
    broker: BrokerProcess, steady: SteadyProducer
) -> None:
    bootstrap = broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("precious", 1, 1)])["precious"].result(10)
    produced = call(bootstrap, _produce_request("precious", [b"a", b"b", b"c"]), 9)
    assert isinstance(produced, m.ProduceResponse)
    epoch = _controller_epoch(broker)
    stale = error_codes.STALE_CONTROLLER_EPOCH.code
    stale_broker = error_codes.STALE_BROKER_EPOCH.code
    # A made-up, higher controller epoch: once obeyed, it deleted the data and fenced
    # the real controller out.
    for controller_epoch, broker_epoch, expected in [
        (epoch + 1000, 1, stale),
        (epoch - 1, 1, stale),
        (epoch, 123456789, stale_broker),  # the right controller, a made-up broker epoch
    ]:
        response = call(bootstrap, _stop_replica(controller_epoch, broker_epoch, "precious"), 3)
        assert isinstance(response, m.StopReplicaResponse)
        assert response.error_code == expected
    old = m.StopReplicaRequest(  # v0 carries no broker epoch: refused too
        controller_id=0,
        controller_epoch=epoch,
        delete_partitions=True,
        ungrouped_partitions=[
            m.StopReplicaRequest.StopReplicaPartitionV0(topic_name="precious", partition_index=0)
        ],
    )
    response = call(bootstrap, old, 0)
    assert isinstance(response, m.StopReplicaResponse) and response.error_code == stale_broker
    follow = m.LeaderAndIsrRequest(
        controller_id=7,
        controller_epoch=epoch + 1,
        broker_epoch=1,
        topic_states=[
            m.LeaderAndIsrRequest.LeaderAndIsrTopicState(
                topic_name="precious",
                partition_states=[
                    m.LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                        topic_name="precious",
                        partition_index=0,
                        controller_epoch=epoch + 1,
                        leader=7,
                        leader_epoch=1000,
                        isr=[7],
                        replicas=[0, 7],
                    )
                ],
            )
        ],
        live_leaders=[
            m.LeaderAndIsrRequest.LeaderAndIsrLiveLeader(broker_id=7, host_name="127.0.0.1", port=1)
        ],
    )
    response = call(bootstrap, follow, 4)
    assert isinstance(response, m.LeaderAndIsrResponse) and response.error_code == stale
    wipe = m.UpdateMetadataRequest(controller_id=0, controller_epoch=epoch + 1, broker_epoch=1)
    response = call(bootstrap, wipe, 7)
    assert isinstance(response, m.UpdateMetadataResponse) and response.error_code == stale
    shutdown = m.ControlledShutdownRequest(broker_id=0, broker_epoch=42)
    response = call(bootstrap, shutdown, 3)
    assert isinstance(response, m.ControlledShutdownResponse)
    assert response.error_code == stale_broker
    # Nothing changed: the data is there and still led here, and the real controller is
    # still obeyed (a new topic gets its leader).
    assert _read_all(bootstrap, "precious", 3) == [b"a", b"b", b"c"]
    produced = call(bootstrap, _produce_request("precious", [b"d"]), 9)
    assert isinstance(produced, m.ProduceResponse)
    assert produced.responses[0].partition_responses[0].error_code == 0
    admin.create_topics([NewTopic("after-forgery", 1, 1)])["after-forgery"].result(10)
    produced = call(bootstrap, _produce_request("after-forgery", [b"x"]), 9)
    assert isinstance(produced, m.ProduceResponse)
    assert produced.responses[0].partition_responses[0].error_code == 0
    assert steady.progresses()


# --- start-up ------------------------------------------------------------------------


def _server(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "riverlog", "server", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_second_broker_on_the_same_data_dir_refuses_to_start(broker: BrokerProcess) -> None:
    done = _server("--listen", "127.0.0.1:0", "--data-dir", str(broker.data_dir))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"riverlog server: Failed to acquire lock on file .lock in {broker.data_dir}. A Kafka "
        "instance in another process or thread is using this directory."
    ]
    assert broker.proc.poll() is None


@pytest.mark.parametrize(
    ("overrides", "status", "message"),
    [
        (["listeners=SSL://127.0.0.1:0"], 1, "a TLS listener needs ssl.keystore.location"),
        (
            [
                "listeners=SSL://127.0.0.1:0",
                "ssl.keystore.type=JKS",
                "ssl.keystore.location=/etc/ks.jks",
            ],
            1,
            "riverlog reads PEM stores only",
        ),
        (
            ["listeners=SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms=GSSAPI"],
            1,
            "SASL mechanism GSSAPI is not supported",
        ),
        (["authorizer.class.name=com.example.Other"], 1, "is not available in riverlog"),
        (["num.partitions=many"], 2, "num.partitions: expected an integer"),
        (["max.connections.per.ip.overrides=10.0.0.1"], 2, "expected host:count"),
        (
            ["zookeeper.connect=127.0.0.1:1", "zookeeper.connection.timeout.ms=300"],
            1,
            "cannot connect to ZooKeeper at 127.0.0.1:1",
        ),
    ],
)
def test_bad_configs_stop_start_up_with_one_line(
    tmp_path: Path, overrides: list[str], status: int, message: str
) -> None:
    args = ["--data-dir", str(tmp_path / "data")]
    for item in overrides:
        args += ["--override", item]
    done = _server(*args)
    assert done.returncode == status
    errors = [line for line in done.stderr.splitlines() if "riverlog server:" in line]
    assert len(errors) == 1 and message in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    if overrides[0].startswith("authorizer"):  # one case is enough: each start costs ~1 s
        verbose = _server(*args, "--verbose")
        assert "Traceback" in verbose.stderr and message in verbose.stderr


def test_port_in_use_and_unusable_data_dir_are_one_line(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    taken = _server("--listen", broker.bootstrap_servers, "--data-dir", str(tmp_path / "d"))
    assert taken.returncode == 1
    assert "address already in use" in taken.stderr and "Traceback" not in taken.stderr
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("x")
    unusable = _server("--listen", "127.0.0.1:0", "--data-dir", str(a_file))
    assert unusable.returncode == 1
    assert str(a_file) in unusable.stderr and "Traceback" not in unusable.stderr


def test_unknown_keys_are_warned_about_in_kafkas_words(tmp_path: Path) -> None:
    running = start_broker(tmp_path / "data", "log.retention.hour=1")
    running.stop()
    log = (tmp_path / "data.broker.log").read_text()
    assert "The configuration 'log.retention.hour' was supplied but isn't a known config." in log


# --- the bound over the whole module ---------------------------------------------------


def test_zz_peak_memory_stayed_bounded(broker: BrokerProcess, steady: SteadyProducer) -> None:
    """Last in the module: the peak over every case above."""
    assert steady.progresses()
    peak = rss(broker.proc.pid).hwm_kib
    assert peak < RSS_BOUND_MIB * 1024, f"peak RSS {peak // 1024} MiB"
