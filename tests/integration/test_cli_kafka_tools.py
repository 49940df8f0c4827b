"""get-offsets, delete-records, log-dirs, dump-log and broker-api-versions against a broker
process: Kafka 3.9's flags, output (golden lines) and error wording.

Records are written by a real client (confluent-kafka) with fixed timestamps, keys and
headers, so every offset, timestamp and size the tools print is known in advance.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from riverlog.cli.kafka_api_keys import API_KEYS
from riverlog.cli.main import main
from tests.integration.conftest import BrokerProcess, start_broker

T0 = (int(time.time()) - 3600) * 1000
"""An hour ago: recent enough that retention (7 days) keeps the records."""


def riverlog(*args: str) -> subprocess.CompletedProcess[str]:
    """The tool run in this process (as `riverlog ARGS` would run; an interpreter start per
    call would cost more than the tools themselves): exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse's usage errors
            code = int(e.code or 0)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    running = start_broker(tmp_path_factory.mktemp("tools") / "data")
    try:
        yield running
    finally:
        running.stop()


def _topic(bs: str, partitions: int, **configs: str) -> str:
    name = f"tools-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bs})
    new = NewTopic(name, partitions, 1, config=configs)
    admin.create_topics([new])[name].result(timeout=30)
    return name


def _produce(bs: str, topic: str, records: list[tuple[int, bytes | None, bytes, int]]) -> None:
    """(partition, key, value, timestamp) each, one batch per record, in order."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bs, "linger.ms": 0, "enable.idempotence": True}
    )
    for partition, key, value, ts in records:
        producer.produce(
            topic, value, key, partition=partition, timestamp=ts, headers=[("h1", b"x")]
        )
        assert producer.flush(30) == 0


def test_get_offsets(broker: BrokerProcess) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs, 3)
    _produce(bs, topic, [(0, None, b"a", T0), (0, None, b"b", T0 + 10), (1, None, b"c", T0 + 5)])

    latest = riverlog("get-offsets", "--bootstrap-server", bs, "--topic", topic)
    assert latest.returncode == 0, latest.stderr
    assert latest.stdout == f"{topic}:0:2\n{topic}:1:1\n{topic}:2:0\n"
    earliest = riverlog(
        "get-offsets",
        "--bootstrap-server",
        bs,
        "--topic-partitions",
        f"{topic}:0-2",
        "--time",
        "-2",
    )
    assert earliest.stdout == f"{topic}:0:0\n{topic}:1:0\n"
    by_time = riverlog(
        "get-offsets",
        "--bootstrap-server",
        bs,
        "--topic",
        topic,
        "--partitions",
        "0,1",
        "--time",
        str(T0 + 1),
    )
    assert by_time.stdout == f"{topic}:0:1\n{topic}:1:0\n"
    max_ts = riverlog(
        "get-offsets", "--bootstrap-server", bs, "--topic", topic, "--time", "max-timestamp"
    )
    assert max_ts.stdout == f"{topic}:0:1\n{topic}:1:0\n"  # partition 2 is empty: left out

    none = riverlog("get-offsets", "--bootstrap-server", bs, "--topic", "no-such-topic")
    assert (none.returncode, none.stderr) == (
        1,
        "Error occurred: Could not match any topic-partitions with the specified filters\n",
    )
    bad_time = riverlog("get-offsets", "--bootstrap-server", bs, "--time", "soon")
    assert bad_time.returncode == 1
    assert bad_time.stderr.startswith("Error occurred: Malformed time argument soon. Please use")
    both = riverlog(
        "get-offsets", "--bootstrap-server", bs, "--topic", topic, "--topic-partitions", topic
    )
    assert both.stderr == (
        "Error occurred: --topic-partitions cannot be used with --topic or --partitions\n"
    )
    unknown = riverlog("get-offsets", "--bootstrap-server", bs, "--no-such-flag")
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("usage: riverlog get-offsets")
    assert "unrecognized arguments: --no-such-flag" in unknown.stderr


def test_delete_records(broker: BrokerProcess, tmp_path: Path) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs, 3)
    _produce(bs, topic, [(p, None, b"v", T0) for p in (0, 0, 0, 1, 1)])
    offsets = tmp_path / "offsets.json"
    offsets.write_text(
        json.dumps(
            {
                "partitions": [
                    {"topic": topic, "partition": 0, "offset": 2},
                    {"topic": topic, "partition": 1, "offset": -1},
                    {"topic": topic, "partition": 2, "offset": 5},
                ],
                "version": 1,
            }
        )
    )
    done = riverlog("delete-records", "--bootstrap-server", bs, "--offset-json-file", str(offsets))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == [
        "Executing records delete operation",
        "Records delete operation completed:",
    ]
    assert sorted(lines[2:]) == sorted(
        [
            f"partition: {topic}-0\tlow_watermark: 2",
            f"partition: {topic}-1\tlow_watermark: 2",
            f"partition: {topic}-2\terror: org.apache.kafka.common.errors."
            "OffsetOutOfRangeException: "
            "The requested offset is not within the range of offsets maintained by the server.",
        ]
    )
    earliest = riverlog(
        "get-offsets", "--bootstrap-server", bs, "--topic", topic, "--time", "earliest"
    )
    assert earliest.stdout == f"{topic}:0:2\n{topic}:1:2\n{topic}:2:0\n"

    offsets.write_text(
        json.dumps(
            {
                "partitions": [
                    {"topic": topic, "partition": 0, "offset": 1},
                    {"topic": topic, "partition": 0, "offset": 2},
                ]
            }
        )
    )
    dup = riverlog("delete-records", "--bootstrap-server", bs, "--offset-json-file", str(offsets))
    assert dup.returncode == 1
    assert dup.stderr == f"Offset json file contains duplicate topic partitions: {topic}-0\n"


def test_log_dirs(broker: BrokerProcess) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs, 2)
    _produce(bs, topic, [(0, b"k", b"value", T0)])
    out = riverlog("log-dirs", "--bootstrap-server", bs, "--describe", "--topic-list", topic)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:2] == [
        "Querying brokers for log directories information",
        "Received log directory information from brokers 0",
    ]
    size0 = (broker.data_dir / f"{topic}-0" / "00000000000000000000.log").stat().st_size
    partitions = {
        p: f'{{"partition":"{topic}-{p}","size":{size0 if p == 0 else 0},'
        '"offsetLag":0,"isFuture":false}'
        for p in (0, 1)
    }
    order = _partition_order(lines[2])  # Java's HashMap order; both partitions, once each
    assert sorted(order) == [0, 1]
    body = ",".join(partitions[p] for p in order)
    assert lines[2] == (
        f'{{"brokers":[{{"broker":0,"logDirs":[{{"partitions":[{body}],'
        f'"error":null,"logDir":"{broker.data_dir}"}}]}}],"version":1}}'
    )
    missing = riverlog("log-dirs", "--bootstrap-server", bs, "--describe", "--broker-list", "0,7")
    assert missing.returncode == 1
    assert missing.stderr == (
        "ERROR: The given brokers do not exist from --broker-list: 7. Current existent brokers: 0\n"
    )


def _partition_order(line: str) -> list[int]:
    return [int(m) for m in re.findall(r'"partition":"[^"]*-(\d+)"', line)]


def test_broker_api_versions(broker: BrokerProcess) -> None:
    out = riverlog("broker-api-versions", "--bootstrap-server", broker.bootstrap_servers)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"{broker.bootstrap_servers} (id: 0 rack: null) -> ("
    assert lines[-1] == ")"
    keys = []
    for i, line in enumerate(lines[1:-1]):
        m = re.fullmatch(
            r"\t(\w+)\((\d+)\): (UNSUPPORTED|(\d+)(?: to (\d+))? \[usable: (\d+)\])"
            + ("" if i == len(lines) - 3 else ","),
            line,
        )
        assert m, line
        keys.append(int(m.group(2)))
        assert m.group(1) == API_KEYS[int(m.group(2))][0]
    assert keys == sorted(keys)
    assert {k for k, v in API_KEYS.items() if v[3]} <= set(keys)
    assert "\tProduce(0): 0 to 11 [usable: 11]," in lines
    assert "\tApiVersions(18): 0 to 4 [usable: 4]," in lines


def test_dump_log(broker: BrokerProcess) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs, 1, **{"index.interval.bytes": "0", "segment.bytes": "300"})
    _produce(
        bs,
        topic,
        [
            (0, b"k1", b"hello", T0),
            (0, None, b"world", T0 + 7),
            (0, b"k3", b"again", T0 + 9),
            (0, b"k4", b"more", T0 + 11),
        ],
    )
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bs, "group.id": "dump-g", "auto.offset.reset": "earliest"}
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 3)])
    consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 3)], asynchronous=False)
    consumer.close()

    d = broker.data_dir / f"{topic}-0"
    first = d / "00000000000000000000.log"
    out = riverlog(
        "dump-log",
        "--print-data-log",
        "--files",
        f"{first},{d / '00000000000000000000.index'},{d / '00000000000000000000.timeindex'}",
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"Dumping {first}"
    assert lines[1] == "Log starting offset: 0"
    batch = re.fullmatch(
        r"baseOffset: 0 lastOffset: 0 count: 1 baseSequence: 0 lastSequence: 0 producerId: (\d+) "
        r"producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: false isControl: false "
        rf"deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: {T0} size: (\d+) "
        r"magic: 2 compresscodec: none crc: (\d+) isvalid: true",
        lines[2],
    )
    assert batch, lines[2]
    assert lines[3] == (
        f"| offset: 0 CreateTime: {T0} keySize: 2 valueSize: 5 sequence: 0 "
        "headerKeys: [h1] key: k1 payload: hello"
    )
    assert lines[5] == (
        f"| offset: 1 CreateTime: {T0 + 7} keySize: -1 valueSize: 5 sequence: 1 "
        "headerKeys: [h1] payload: world"
    )
    size = int(batch.group(2))
    index_at = lines.index(f"Dumping {d / '00000000000000000000.index'}")
    assert lines[index_at + 1 : index_at + 3] == [
        "offset: 0 position: 0",
        f"offset: 1 position: {size}",
    ]
    time_at = lines.index(f"Dumping {d / '00000000000000000000.timeindex'}")
    assert lines[time_at + 1] == f"timestamp: {T0} offset: 0"
    assert out.stderr == ""

    sane = riverlog(
        "dump-log", "--index-sanity-check", "--files", str(d / "00000000000000000000.index")
    )
    assert sane.stdout.splitlines()[1] == f"{d / '00000000000000000000.index'} passed sanity check."

    snapshots = sorted(d.glob("*.snapshot"))
    assert snapshots, "a rolled segment leaves a producer snapshot"
    snap = riverlog("dump-log", "--files", str(snapshots[-1]))
    assert re.fullmatch(
        r"producerId: \d+ producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: "
        r"OptionalLong.empty lastTimestamp: \d+ firstSequence: \d+ lastSequence: \d+ "
        r"lastOffset: \d+ offsetDelta: 0 timestamp: \d+",
        snap.stdout.splitlines()[1],
    )

    group_logs = [p for p in broker.data_dir.glob("__consumer_offsets-*/*.log") if p.stat().st_size]
    decoded = riverlog("dump-log", "--offsets-decoder", "--files", ",".join(map(str, group_logs)))
    assert (
        f'key: {{"type":"1","data":{{"group":"dump-g","topic":"{topic}","partition":0}}}} '
        'payload: {"version":"3","data":{"offset":3,"leaderEpoch":'
    ) in decoded.stdout

    unknown = riverlog("dump-log", "--files", str(broker.data_dir / "meta.properties"))
    assert unknown.stderr == f"Ignoring unknown file {broker.data_dir / 'meta.properties'}\n"


def test_command_config_is_read(broker: BrokerProcess, tmp_path: Path) -> None:
    props = tmp_path / "client.properties"
    props.write_text("# a comment\nclient.id = from-file\nrequest.timeout.ms: 5000\n")
    topic = _topic(broker.bootstrap_servers, 1)
    ok = riverlog(
        "get-offsets",
        "--bootstrap-server",
        broker.bootstrap_servers,
        "--command-config",
        str(props),
        "--topic",
        topic,
    )
    assert (ok.returncode, ok.stdout) == (0, f"{topic}:0:0\n"), ok.stderr
    props.write_text("no.such.client.key=1\n")
    refused = riverlog(
        "log-dirs",
        "--bootstrap-server",
        broker.bootstrap_servers,
        "--describe",
        "--command-config",
        str(props),
    )
    assert refused.returncode == 1
    assert "no.such.client.key" in refused.stderr


def test_output_into_a_closed_pipe_is_quiet(broker: BrokerProcess) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs, 1)
    producer = confluent_kafka.Producer({"bootstrap.servers": bs})
    for i in range(3000):
        producer.produce(topic, b"x" * 100 + str(i).encode(), partition=0)
    assert producer.flush(30) == 0
    riverlog_cli = f"{sys.executable} -m riverlog"
    for command, first in (
        (f"broker-api-versions --bootstrap-server {bs}", "-> (\n"),
        (
            f"console-consumer --bootstrap-server {bs} --topic {topic} --from-beginning "
            "--max-messages 3000",
            "0\n",
        ),
        (
            f"dump-log --deep-iteration --files {broker.data_dir}/{topic}-0/"
            "00000000000000000000.log",
            ".log\n",
        ),
    ):
        out = subprocess.run(
            ["bash", "-c", f"{riverlog_cli} {command} | head -1"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.stdout.endswith(first), (command, out.stdout)
        assert "Broken pipe" not in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert "ERROR" not in out.stderr and "Error" not in out.stderr, out.stderr
