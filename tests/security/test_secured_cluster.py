"""A 3-broker cluster whose inter-broker traffic is SASL_SSL (SCRAM-SHA-512) under the ACL
authorizer: followers replicate, the controller's requests pass ClusterAction as the
broker's login, clients on SASL_SSL are told SASL_SSL endpoints, and a killed leader fails
over with no acknowledged record lost (issue 23)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from riverlog.devcluster import free_port
from riverlog.metadata.zookeeper import ZooKeeperStore
from riverlog.security import scram_credentials
from riverlog.security.dev_certs import DevCerts, write_dev_certs
from tests.cluster_harness import FAST_SETTINGS, Cluster, wait_until
from tests.zookeeper_server import ZooKeeperServer

pytestmark = pytest.mark.timeout(150)

SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="admin" password="admin-secret";'
)


def secured_settings(certs: DevCerts, port: int, sasl_port: int) -> dict[str, str]:
    return {
        **FAST_SETTINGS,
        "listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_port}",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        "ssl.keystore.location": str(certs.broker),
        "ssl.truststore.location": str(certs.ca),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "min.insync.replicas": "2",
    }


@pytest.fixture(scope="module")
def secured_cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Cluster, dict[int, int], DevCerts]]:
    directory = tmp_path_factory.mktemp("secured-cluster")
    certs = write_dev_certs(directory / "certs")
    cluster = Cluster(zookeeper, directory, 3)
    # The brokers' own SCRAM login must exist before they start (as with Kafka, where it is
    # created in ZooKeeper first).
    store = ZooKeeperStore(cluster.zk_connect)
    try:
        credential = scram_credentials.make("SCRAM-SHA-512", "admin-secret", 4096)
        scram_credentials.store_credential(store, "admin", "SCRAM-SHA-512", credential)
    finally:
        store.close()
    sasl_ports = {}
    for broker_id, broker in cluster.brokers.items():
        sasl_ports[broker_id] = free_port()
        broker.settings = secured_settings(certs, broker.port, sasl_ports[broker_id])
    cluster.start()
    try:
        yield cluster, sasl_ports, certs
    finally:
        cluster.stop()


def client_config(sasl_ports: dict[int, int], certs: DevCerts) -> dict[str, str]:
    return {
        "bootstrap.servers": ",".join(f"127.0.0.1:{p}" for p in sasl_ports.values()),
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(certs.ca),
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "admin",
        "sasl.password": "admin-secret",
    }


def _partitions(conf: dict[str, str], topic: str) -> dict[int, tuple[int, list[int]]]:
    found = AdminClient(conf).list_topics(topic, timeout=10).topics[topic].partitions
    return {p: (meta.leader, list(meta.isrs)) for p, meta in found.items()}


def _isr_full(conf: dict[str, str], topic: str, size: int) -> bool:
    try:
        parts = _partitions(conf, topic)
    except KafkaException:
        return False
    return bool(parts) and all(leader >= 0 and len(isr) == size for leader, isr in parts.values())


def _produce(conf: dict[str, str], topic: str, values: list[bytes]) -> None:
    producer = Producer({**conf, "acks": "all", "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(60) == 0


def _consume(conf: dict[str, str], topic: str, partitions: int, count: int) -> list[bytes]:
    consumer = Consumer(
        {**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    deadline = time.monotonic() + 40
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    return got


def test_replication_and_failover_over_sasl_ssl(
    secured_cluster: tuple[Cluster, dict[int, int], DevCerts],
) -> None:
    cluster, sasl_ports, certs = secured_cluster
    conf = client_config(sasl_ports, certs)
    topic = f"secure-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(conf)  # alive until the result is in
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)
    wait_until(lambda: _isr_full(conf, topic, 3), 40, "replication over SASL_SSL (full ISRs)")

    # Metadata on the SASL_SSL listener names every broker's SASL_SSL endpoint
    brokers = admin.list_topics(timeout=10).brokers
    assert {b.port for b in brokers.values()} == set(sasl_ports.values())

    first = [b"before-%d" % i for i in range(300)]
    _produce(conf, topic, first)
    leader = _partitions(conf, topic)[0][0]
    cluster.brokers[leader].kill()
    wait_until(
        lambda: all(lead not in (-1, leader) for lead, _ in _partitions(conf, topic).values()),
        40,
        "leaders moved off the killed broker",
    )
    second = [b"after-%d" % i for i in range(300)]
    _produce(conf, topic, second)
    assert sorted(_consume(conf, topic, 3, 600)) == sorted(first + second)

    cluster.brokers[leader].start()
    wait_until(lambda: _isr_full(conf, topic, 3), 60, "the restarted broker back in the ISRs")


def test_registration_carries_every_endpoint(
    secured_cluster: tuple[Cluster, dict[int, int], DevCerts],
) -> None:
    cluster, sasl_ports, _ = secured_cluster
    store = ZooKeeperStore(cluster.zk_connect)
    try:
        registration = json.loads(store.get("/brokers/ids/1").data)
    finally:
        store.close()
    port = cluster.brokers[1].port
    assert sorted(registration["endpoints"]) == sorted(
        [f"PLAINTEXT://127.0.0.1:{port}", f"SASL_SSL://127.0.0.1:{sasl_ports[1]}"]
    )
    assert registration["listener_security_protocol_map"] == {
        "PLAINTEXT": "PLAINTEXT",
        "SASL_SSL": "SASL_SSL",
    }
    assert (registration["host"], registration["port"]) == ("127.0.0.1", port)


def test_plaintext_clients_are_refused_without_acls(
    secured_cluster: tuple[Cluster, dict[int, int], DevCerts], tmp_path: Path
) -> None:
    """The PLAINTEXT listener's clients are User:ANONYMOUS: no ACL, no access."""
    cluster, _, _ = secured_cluster
    admin = AdminClient({"bootstrap.servers": cluster.brokers[1].address})
    name = f"anon-{uuid.uuid4().hex[:6]}"
    with pytest.raises(KafkaException, match="AUTHORIZATION_FAILED"):
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(20)
