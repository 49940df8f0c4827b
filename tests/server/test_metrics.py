"""The Prometheus endpoint under a known load: confluent-kafka produces N records of known
size to two topics, a group consumes part of one, another consumer reads one topic whole; the
scraped counters and gauges must equal what was done and what the cluster says (log files on
disk, confluent-kafka's watermarks and committed offsets). Then, in a 2-broker cluster, a
frozen follower is dropped from each ISR its leader holds (one ISR shrink per partition) and
joins again when thawed (one expand each), and a stopped follower shows as an
under-replicated partition on the leader's endpoint."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from riverlog.client.connection import connect_any
from riverlog.devcluster import free_port
from riverlog.embedded import EmbeddedBroker, broker
from riverlog.metrics_http import parse_listener
from riverlog.protocol.messages import MetadataRequest, ProduceRequest
from tests.cluster_harness import Cluster, partitions_of, wait_until

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
VALUE = b"v" * 100


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def one(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def total(samples: Samples, name: str, **labels: str) -> float:
    return sum(
        v for (n, ls), v in samples.items() if n == name and labels.items() <= dict(ls).items()
    )


@pytest.fixture
def running(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with broker(tmp_path / "data", overrides={"metrics.listener": "http://127.0.0.1:0"}) as b:
        yield b


def _log_bytes(data: Path, topic: str) -> int:
    return sum(f.stat().st_size for d in data.glob(f"{topic}-*") for f in d.glob("*.log"))


def test_scraped_metrics_equal_the_load(running: EmbeddedBroker, tmp_path: Path) -> None:
    assert running.broker is not None and running.broker.metrics is not None
    port = running.broker.metrics.port
    bootstrap = running.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("alpha", 2, 1), NewTopic("beta", 1, 1)]).values():
        f.result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(300):
        producer.produce("alpha", VALUE, key=b"%d" % i, partition=i % 2)
    for i in range(120):
        producer.produce("beta", VALUE, key=b"%d" % i)
    assert producer.flush(30) == 0

    # a group consumes 100 records of alpha and commits; another reads beta whole
    group = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "billing",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    group.subscribe(["alpha"])
    taken = {0: 0, 1: 0}  # every partition gets a committed offset
    while sum(taken.values()) < 100:
        m = group.poll(10)
        assert m is not None and m.error() is None
        taken[m.partition()] = m.offset() + 1
    group.commit(
        offsets=[confluent_kafka.TopicPartition("alpha", p, n) for p, n in taken.items()],
        asynchronous=False,
    )
    group.close()
    reader = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reader",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    reader.assign([confluent_kafka.TopicPartition("beta", 0, 0)])
    read = 0
    while read < 120:
        m = reader.poll(10)
        assert m is not None and m.error() is None
        read += 1
    reader.close()

    s = scrape(port)
    data = tmp_path / "data"
    assert one(s, "kafka_server_brokertopicmetrics_messagesin_total", topic="alpha") == 300
    assert one(s, "kafka_server_brokertopicmetrics_messagesin_total", topic="beta") == 120
    for topic in ("alpha", "beta"):
        on_disk = _log_bytes(data, topic)
        assert one(s, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic) == on_disk
        assert total(s, "kafka_log_log_size", topic=topic) == on_disk
    # beta was read once, whole, by the one consumer that read it
    assert one(s, "kafka_server_brokertopicmetrics_bytesout_total", topic="beta") == (
        _log_bytes(data, "beta")
    )
    assert total(s, "kafka_log_log_logendoffset", topic="alpha") == 300

    # lag = end - committed, per partition, as confluent-kafka sees the group
    watcher = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "billing"})
    parts = [confluent_kafka.TopicPartition("alpha", p) for p in range(2)]
    committed = {tp.partition: tp.offset for tp in watcher.committed(parts, timeout=10)}
    ends = {p: watcher.get_watermark_offsets(parts[p], timeout=10)[1] for p in range(2)}
    watcher.close()
    for p in range(2):
        labels = {"consumergroup": "billing", "topic": "alpha", "partition": str(p)}
        assert one(s, "kafka_consumergroup_current_offset", **labels) == committed[p]
        assert one(s, "kafka_consumergroup_lag", **labels) == ends[p] - committed[p]
        assert one(s, "kafka_consumergroup_lag_seconds", **labels) >= 0
    assert one(s, "kafka_consumergroup_lag_sum", consumergroup="billing", topic="alpha") == 200
    assert one(s, "kafka_coordinator_group_groupmetadatamanager_numgroupsempty") >= 1
    assert one(s, "kafka_server_replicamanager_leadercount") == 3 + 50  # + __consumer_offsets
    assert one(s, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert one(s, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert one(s, "kafka_controller_kafkacontroller_globaltopiccount") == 3

    # exactly K requests of a type, and an error, from a client whose requests are known
    before = scrape(port)
    asyncio.run(_known_requests(bootstrap, metadata=7))
    after = scrape(port)
    requests = "kafka_network_requestmetrics_requests_total"
    assert one(after, requests, request="Metadata") - one(before, requests, request="Metadata") == 7
    assert one(after, requests, request="Produce") - one(before, requests, request="Produce") == 1
    errors = "kafka_network_requestmetrics_errors_total"
    assert one(after, errors, request="Produce", error="UNKNOWN_TOPIC_OR_PARTITION") == 1
    histogram = "kafka_network_requestmetrics_totaltimems_count"
    assert one(after, histogram, request="Metadata") == one(after, requests, request="Metadata")


async def _known_requests(bootstrap: str, metadata: int) -> None:
    conn = await connect_any(bootstrap)
    try:
        for _ in range(metadata):
            await conn.send(MetadataRequest(topics=[], allow_auto_topic_creation=False))
        await conn.send(
            ProduceRequest(
                acks=1,
                timeout_ms=1000,
                topic_data=[
                    ProduceRequest.TopicProduceData(
                        name="no-such-topic",
                        partition_data=[ProduceRequest.PartitionProduceData(index=0, records=b"")],
                    )
                ],
            )
        )
    finally:
        await conn.close()


def test_the_endpoint_answers_only_metrics(running: EmbeddedBroker) -> None:
    assert running.broker is not None and running.broker.metrics is not None
    port = running.broker.metrics.port
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
    assert raised.value.code == 404
    assert parse_listener("") is None
    for bad in ("127.0.0.1:9", "https://h:1", "http://h", "http://h:1/path"):
        with pytest.raises(ValueError, match="expected http://HOST:PORT"):
            parse_listener(bad)


def test_metrics_are_off_when_unset(tmp_path: Path) -> None:
    with broker(tmp_path / "data") as b:
        assert b.broker is not None
        assert b.broker.metrics is None and b.broker.dispatcher.metrics is None


@pytest.mark.slow
def test_isr_changes_and_a_stopped_follower_show_on_the_leader(
    zookeeper: object, tmp_path: Path
) -> None:
    cluster = Cluster(
        zookeeper,
        tmp_path,
        brokers=2,
        settings={  # type: ignore[arg-type]
            "offsets.topic.replication.factor": "1",
            "replica.lag.time.max.ms": "2000",
            "zookeeper.session.timeout.ms": "30000",  # a frozen broker stays registered
        },
    )
    ports = {}
    for i, b in cluster.brokers.items():
        ports[i] = free_port()
        b.settings = {**b.settings, "metrics.listener": f"http://127.0.0.1:{ports[i]}"}
    cluster.start()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        topic = "replicated"
        admin.create_topics([NewTopic(topic, 2, replica_assignment=[[1, 2], [1, 2]])])[
            topic
        ].result(30)
        wait_until(
            lambda: all(len(isr) == 2 for _, _, isr in partitions_of(cluster, topic).values()),
            30,
            "the ISRs full",
        )
        gauge = "kafka_server_replicamanager_underreplicatedpartitions"
        assert one(scrape(ports[1]), gauge) == 0

        # frozen, the follower stops fetching: the leader itself drops it from both ISRs
        shrinks, expands = (
            "kafka_server_replicamanager_isrshrinks_total",
            "kafka_server_replicamanager_isrexpands_total",
        )
        before = scrape(ports[1])
        cluster.brokers[2].freeze()
        wait_until(lambda: one(scrape(ports[1]), gauge) == 2, 30, f"{topic} ISRs shrunk")
        s = scrape(ports[1])
        assert one(s, shrinks) - one(before, shrinks) == 2
        assert one(s, expands) == one(before, expands)
        cluster.brokers[2].thaw()  # it catches up; the leader adds it back to both
        wait_until(lambda: one(scrape(ports[1]), gauge) == 0, 30, f"{topic} ISRs full again")
        s = scrape(ports[1])
        assert one(s, shrinks) - one(before, shrinks) == 2
        assert one(s, expands) - one(before, expands) == 2
        assert (one(scrape(ports[2]), shrinks), one(scrape(ports[2]), expands)) == (0, 0)

        cluster.brokers[2].stop()
        wait_until(lambda: one(scrape(ports[1]), gauge) == 2, 30, f"{topic} under-replicated")
        # a controlled shutdown: the controller took broker 2 out of the ISRs, not the leader
        assert one(scrape(ports[1]), shrinks) - one(before, shrinks) == 2
        cluster.brokers[2].start()
        wait_until(lambda: one(scrape(ports[1]), gauge) == 0, 30, f"{topic} fully replicated")
    finally:
        cluster.stop()
