"""The client matrix against a 3-broker cluster whose inter-broker traffic is SASL_SSL (issue 23).

One cluster for the module: every broker listens on PLAINTEXT, SSL (client certificates
requested), SASL_PLAINTEXT (PLAIN) and SASL_SSL (SCRAM-SHA-256/512); brokers replicate, and
the controller reaches them, on SASL_SSL as `User:admin` (SCRAM-SHA-512) under the ACL
authorizer. confluent-kafka, kafka-python, aiokafka, kcat and riverlog's client each produce
to and consume from a 3-replica topic over SSL (with and without a client certificate),
SASL_PLAINTEXT/PLAIN and SASL_SSL/SCRAM-SHA-256 and -512. Then a leader is killed and every
client keeps going over a secured listener, with no acknowledged record lost; the broker
comes back into the ISRs over SASL_SSL.

Principals: `alice` (PLAIN, from the JAAS line), `bob` (SCRAM, stored in ZooKeeper as Kafka
stores it), `client` (the client certificate, mapped by `ssl.principal.mapping.rules`) and
`admin` are super users; `User:ANONYMOUS` (SSL without a certificate, and PLAINTEXT) gets
prefixed ACLs on the test's topics and groups only (idempotent producers start on those,
KIP-679), so PLAINTEXT clients are refused anything else.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import KafkaException
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from riverlog.client import AsyncConsumer, AsyncProducer
from riverlog.devcluster import free_port
from riverlog.metadata.zookeeper import ZooKeeperStore
from riverlog.security import scram_credentials
from riverlog.security.dev_certs import DevCerts, write_dev_certs
from tests.cluster_harness import FAST_SETTINGS, Cluster, wait_until
from tests.zookeeper_server import ZooKeeperServer

pytestmark = pytest.mark.timeout(240)

LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
ADMIN_SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="admin" password="admin-secret";'
)
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_alice="alice-secret" user_admin="admin-secret";'
)
COUNT = 20
# (listener, SASL mechanism or None, with a client certificate)
CASES = [
    ("SSL", None, False),
    ("SSL", None, True),
    ("SASL_PLAINTEXT", "PLAIN", False),
    ("SASL_SSL", "SCRAM-SHA-256", False),
    ("SASL_SSL", "SCRAM-SHA-512", False),
]
IDS = ["ssl", "ssl-client-cert", "sasl-plain", "sasl-ssl-scram256", "sasl-ssl-scram512"]
CLIENTS = ("ck", "kcat", "kp", "aio", "rl")
# After a leader is killed, each client goes on over one of the secured listeners.
AFTER_FAILOVER = {
    "ck": ("SASL_SSL", "SCRAM-SHA-512", False),
    "kcat": ("SSL", None, True),
    "kp": ("SSL", None, False),
    "aio": ("SASL_PLAINTEXT", "PLAIN", False),
    "rl": ("SASL_SSL", "SCRAM-SHA-256", False),
}


@dataclass
class SecuredCluster:
    cluster: Cluster
    certs: DevCerts
    ports: dict[int, dict[str, int]]
    """broker id -> listener -> port"""

    def bootstrap(self, listener: str) -> str:
        return ",".join(f"127.0.0.1:{p[listener]}" for p in self.ports.values())

    def admin_conf(self) -> dict[str, str]:
        return librdkafka_conf(self, "SASL_SSL", "SCRAM-SHA-512", False, user="admin")


def broker_settings(certs: DevCerts, ports: dict[str, int]) -> dict[str, str]:
    return {
        **FAST_SETTINGS,
        "listeners": ",".join(f"{n}://127.0.0.1:{ports[n]}" for n in LISTENERS),
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": ADMIN_SCRAM_JAAS,
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.broker),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca),
        "ssl.client.auth": "requested",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),OU=riverlog,.*$/$1/L,DEFAULT",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin;User:alice;User:bob;User:client",
        "default.replication.factor": "3",
        "min.insync.replicas": "2",
    }


def matrix_topic(client: str, case: str) -> str:
    return f"matrix-{client}-{case}"


@pytest.fixture(scope="module")
def secured(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecuredCluster]:
    directory = tmp_path_factory.mktemp("secured-cluster")
    certs = write_dev_certs(directory / "certs")
    cluster = Cluster(zookeeper, directory, 3)
    # Logins must exist before the brokers start (as with Kafka, created in ZooKeeper first).
    store = ZooKeeperStore(cluster.zk_connect)
    try:
        for user, password, mechanisms in (
            ("admin", "admin-secret", ["SCRAM-SHA-512"]),
            ("bob", "bob-secret", list(scram_credentials.MECHANISMS)),
        ):
            for mechanism in mechanisms:
                credential = scram_credentials.make(mechanism, password, 4096)
                scram_credentials.store_credential(store, user, mechanism, credential)
    finally:
        store.close()
    ports: dict[int, dict[str, int]] = {}
    for broker_id, broker in cluster.brokers.items():
        ports[broker_id] = {n: broker.port if n == "PLAINTEXT" else free_port() for n in LISTENERS}
        broker.settings = broker_settings(certs, ports[broker_id])
    cluster.start()
    running = SecuredCluster(cluster, certs, ports)
    try:
        _prepare(running)
        yield running
    finally:
        cluster.stop()


def _prepare(secured: SecuredCluster) -> None:
    """Every matrix topic (3 replicas) at once, and User:ANONYMOUS's ACLs, as admin."""
    admin = AdminClient(secured.admin_conf())
    names = [matrix_topic(c, case) for c in CLIENTS for case in IDS]
    names += [f"after-{c}" for c in CLIENTS] + ["failover"]
    for future in admin.create_topics(
        [NewTopic(n, 3 if n == "failover" else 1) for n in names]
    ).values():
        future.result(60)
    anonymous = [
        (ResourceType.TOPIC, "matrix-", ResourcePatternType.PREFIXED, AclOperation.ALL),
        (ResourceType.TOPIC, "after-", ResourcePatternType.PREFIXED, AclOperation.ALL),
        (ResourceType.GROUP, "matrix", ResourcePatternType.PREFIXED, AclOperation.READ),
        # no IdempotentWrite: kafka-python's idempotent producers start on the topic ACLs
        # alone (KIP-679, Write on any topic)
    ]
    bindings = [
        AclBinding(kind, name, pattern, "User:ANONYMOUS", "*", op, AclPermissionType.ALLOW)
        for kind, name, pattern, op in anonymous
    ]
    for future in admin.create_acls(bindings).values():
        future.result(30)
    wait_until(lambda: _all_isrs_full(secured, names), 60, "replication over SASL_SSL")


def _partitions(conf: dict[str, str], topic: str) -> dict[int, tuple[int, list[int]]]:
    found = AdminClient(conf).list_topics(topic, timeout=10).topics[topic].partitions
    return {p: (meta.leader, list(meta.isrs)) for p, meta in found.items()}


def _all_isrs_full(secured: SecuredCluster, topics: list[str]) -> bool:
    try:
        listed = AdminClient(secured.admin_conf()).list_topics(timeout=10).topics
    except KafkaException:
        return False
    return all(
        t in listed
        and listed[t].partitions
        and all(p.leader >= 0 and len(p.isrs) == 3 for p in listed[t].partitions.values())
        for t in topics
    )


def _values(tag: str = "") -> list[bytes]:
    return [b"%svalue-%d" % (tag.encode(), i) for i in range(COUNT)]


def _login(mechanism: str | None, user: str | None = None) -> tuple[str, str]:
    if user is not None:
        return user, f"{user}-secret"
    return ("alice", "alice-secret") if mechanism == "PLAIN" else ("bob", "bob-secret")


def librdkafka_conf(
    secured: SecuredCluster,
    listener: str,
    mechanism: str | None,
    cert: bool,
    user: str | None = None,
) -> dict[str, str]:
    conf = {"bootstrap.servers": secured.bootstrap(listener), "security.protocol": listener}
    if "SSL" in listener:
        conf["ssl.ca.location"] = str(secured.certs.ca)
    if cert:
        conf["ssl.certificate.location"] = str(secured.certs.client_cert)
        conf["ssl.key.location"] = str(secured.certs.client_key)
    if mechanism:
        name, password = _login(mechanism, user)
        conf |= {"sasl.mechanism": mechanism, "sasl.username": name, "sasl.password": password}
    return conf


# --- one round trip per client: produce COUNT values, consume them back ------------------


def roundtrip_ck(secured: SecuredCluster, case: tuple[str, str | None, bool], topic: str) -> None:
    conf = librdkafka_conf(secured, *case)
    producer = CKProducer({**conf, "acks": "all"})
    for value in _values(topic):
        producer.produce(topic, value)
    assert producer.flush(30) == 0
    consumer = CKConsumer({**conf, "group.id": "matrix-ck", "enable.auto.commit": False})
    consumer.assign([CKTopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < COUNT and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    assert got == _values(topic)


def roundtrip_kcat(secured: SecuredCluster, case: tuple[str, str | None, bool], topic: str) -> None:
    conf = librdkafka_conf(secured, *case)
    bootstrap = conf.pop("bootstrap.servers")
    if "sasl.mechanism" in conf:
        conf["sasl.mechanisms"] = conf.pop("sasl.mechanism")
    options = [arg for key, value in conf.items() for arg in ("-X", f"{key}={value}")]
    subprocess.run(
        ["kcat", "-P", "-b", bootstrap, "-t", topic, "-p", "0", "-X", "acks=all", *options],
        input=b"\n".join(_values(topic)),
        check=True,
        timeout=60,
    )
    out = subprocess.run(
        ["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", *options],
        capture_output=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.splitlines() == _values(topic)


def roundtrip_kp(secured: SecuredCluster, case: tuple[str, str | None, bool], topic: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    listener, mechanism, cert = case
    conf: dict[str, object] = {
        "bootstrap_servers": secured.bootstrap(listener).split(","),
        "security_protocol": listener,
    }
    if "SSL" in listener:
        conf["ssl_cafile"] = str(secured.certs.ca)
    if cert:
        conf["ssl_certfile"] = str(secured.certs.client_cert)
        conf["ssl_keyfile"] = str(secured.certs.client_key)
    if mechanism:
        user, password = _login(mechanism)
        conf |= {
            "sasl_mechanism": mechanism,
            "sasl_plain_username": user,
            "sasl_plain_password": password,
        }
    producer = KafkaProducer(**conf, acks="all")
    for value in _values(topic):
        producer.send(topic, value, partition=0)
    producer.flush(30)
    producer.close(5)
    consumer = KafkaConsumer(**conf, consumer_timeout_ms=500)
    consumer.assign([KTopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < COUNT and time.monotonic() < deadline:
        for records in consumer.poll(500).values():
            got += [r.value for r in records]
    consumer.close()
    assert got == _values(topic)


def roundtrip_aio(secured: SecuredCluster, case: tuple[str, str | None, bool], topic: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context
    from aiokafka.structs import TopicPartition as ATopicPartition

    listener, mechanism, cert = case
    conf: dict[str, object] = {
        "bootstrap_servers": secured.bootstrap(listener),
        "security_protocol": listener,
    }
    if "SSL" in listener:
        conf["ssl_context"] = create_ssl_context(
            cafile=str(secured.certs.ca),
            certfile=str(secured.certs.client_cert) if cert else None,
            keyfile=str(secured.certs.client_key) if cert else None,
        )
    if mechanism:
        user, password = _login(mechanism)
        conf |= {
            "sasl_mechanism": mechanism,
            "sasl_plain_username": user,
            "sasl_plain_password": password,
        }

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**conf, acks="all")
        await producer.start()
        try:
            for value in _values(topic):
                await producer.send(topic, value, partition=0)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**conf, auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([ATopicPartition(topic, 0)])
            got: list[bytes] = []
            async with asyncio.timeout(30):
                while len(got) < COUNT:
                    batches = await consumer.getmany(timeout_ms=500)
                    got += [r.value for rs in batches.values() for r in rs]
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == _values(topic)


def roundtrip_rl(secured: SecuredCluster, case: tuple[str, str | None, bool], topic: str) -> None:
    listener, mechanism, cert = case
    conf: dict[str, object] = {
        "bootstrap.servers": secured.bootstrap(listener),
        "security.protocol": listener,
    }
    if "SSL" in listener:  # Kafka's key names here; librdkafka's are covered above
        conf["ssl.truststore.type"] = "PEM"
        conf["ssl.truststore.location"] = str(secured.certs.ca)
    if cert:
        conf["ssl.keystore.type"] = "PEM"
        conf["ssl.keystore.location"] = str(secured.certs.client)
    if mechanism:
        user, password = _login(mechanism)
        module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
        conf["sasl.mechanism"] = mechanism
        conf["sasl.jaas.config"] = (
            f"org.apache.kafka.common.security.{module} required "
            f'username="{user}" password="{password}";'
        )

    async def run() -> list[bytes]:
        async with AsyncProducer({**conf, "acks": "all"}) as producer:
            for value in _values(topic):
                await producer.send(topic, value, partition=0)
        consumer = AsyncConsumer(conf)
        consumer.assign([(topic, 0)])
        consumer.seek_to_beginning()
        got: list[bytes] = []
        async with consumer:
            async with asyncio.timeout(30):
                while len(got) < COUNT:
                    got += [bytes(r.value) for r in await consumer.poll(500) if r.value is not None]
        return got

    assert asyncio.run(run()) == _values(topic)


ROUNDTRIPS = {
    "ck": roundtrip_ck,
    "kcat": roundtrip_kcat,
    "kp": roundtrip_kp,
    "aio": roundtrip_aio,
    "rl": roundtrip_rl,
}


@pytest.mark.parametrize(("listener", "mechanism", "cert"), CASES, ids=IDS)
@pytest.mark.parametrize("client", CLIENTS)
def test_client_matrix(
    secured: SecuredCluster, client: str, listener: str, mechanism: str | None, cert: bool
) -> None:
    if client == "kcat" and shutil.which("kcat") is None:
        pytest.skip("kcat is installed by ./dev setup")
    case_id = IDS[CASES.index((listener, mechanism, cert))]
    ROUNDTRIPS[client](secured, (listener, mechanism, cert), matrix_topic(client, case_id))


def test_registration_carries_every_endpoint(secured: SecuredCluster) -> None:
    store = ZooKeeperStore(secured.cluster.zk_connect)
    try:
        registration = json.loads(store.get("/brokers/ids/1").data)
    finally:
        store.close()
    ports = secured.ports[1]
    assert sorted(registration["endpoints"]) == sorted(
        f"{n}://127.0.0.1:{ports[n]}" for n in LISTENERS
    )
    assert registration["listener_security_protocol_map"] == {n: n for n in LISTENERS}
    assert (registration["host"], registration["port"]) == ("127.0.0.1", ports["PLAINTEXT"])


def test_metadata_names_the_listener_the_client_came_in_on(secured: SecuredCluster) -> None:
    for listener, mechanism, cert in CASES:
        conf = librdkafka_conf(secured, listener, mechanism, cert)
        brokers = AdminClient(conf).list_topics(timeout=10).brokers
        assert {b.port for b in brokers.values()} == {p[listener] for p in secured.ports.values()}


def test_plaintext_clients_are_refused_without_acls(secured: SecuredCluster) -> None:
    """PLAINTEXT clients are User:ANONYMOUS: nothing beyond the ACLs granted to it."""
    admin = AdminClient({"bootstrap.servers": secured.bootstrap("PLAINTEXT")})
    name = f"anon-{uuid.uuid4().hex[:6]}"
    with pytest.raises(KafkaException, match="AUTHORIZATION_FAILED"):
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(20)


def test_transactions_span_brokers_under_acls(secured: SecuredCluster) -> None:
    """A transactional producer as User:ANONYMOUS with Kafka's producer ACLs (Write and
    Describe on its transactional id, the topic ACLs above) commits across three partitions
    led by three brokers: the leaders verify the transaction with AddPartitionsToTxn v4 and
    the coordinator writes the markers with WriteTxnMarkers, both on SASL_SSL as the
    brokers' principal (ClusterAction); a read_committed consumer sees every record."""
    admin = AdminClient(secured.admin_conf())
    topic, txn = f"matrix-txn-{uuid.uuid4().hex[:6]}", f"matrix-txn-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 3)])[topic].result(60)
    acls = [
        AclBinding(
            ResourceType.TRANSACTIONAL_ID,
            txn,
            ResourcePatternType.LITERAL,
            "User:ANONYMOUS",
            "*",
            op,
            AclPermissionType.ALLOW,
        )
        for op in (AclOperation.WRITE, AclOperation.DESCRIBE)
    ]
    for future in admin.create_acls(acls).values():
        future.result(30)
    wait_until(lambda: _all_isrs_full(secured, [topic]), 60, "the topic's replicas")
    assert len({lead for lead, _ in _partitions(secured.admin_conf(), topic).values()}) == 3
    conf = {"bootstrap.servers": secured.bootstrap("PLAINTEXT")}
    producer = CKProducer({**conf, "transactional.id": txn})
    producer.init_transactions(30)
    producer.begin_transaction()
    values = [b"txn-%d" % i for i in range(30)]
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % 3)
    producer.commit_transaction(60)
    consumer = CKConsumer({**conf, "group.id": "matrix-txn", "isolation.level": "read_committed"})
    consumer.assign([CKTopicPartition(topic, p, 0) for p in range(3)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < len(values) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    assert sorted(got) == sorted(values)


def test_failover_keeps_every_client_going(secured: SecuredCluster) -> None:
    """Kill the leader of a 3-replica topic: what was acknowledged survives, and every client
    keeps producing and consuming over a secured listener; the broker rejoins over SASL_SSL.
    Last in the module: it restarts a broker."""
    conf = secured.admin_conf()
    first = [b"before-%d" % i for i in range(300)]
    producer = CKProducer({**conf, "acks": "all", "enable.idempotence": True})
    for value in first:
        producer.produce("failover", value)
    assert producer.flush(60) == 0

    leader = _partitions(conf, "failover")[0][0]
    secured.cluster.brokers[leader].kill()
    wait_until(
        lambda: all(lead not in (-1, leader) for lead, _ in _partitions(conf, "failover").values()),
        40,
        "leaders moved off the killed broker",
    )
    wait_until(
        lambda: all(_partitions(conf, f"after-{c}")[0][0] not in (-1, leader) for c in CLIENTS),
        40,
        "the clients' topics led by the brokers left",
    )
    second = [b"after-%d" % i for i in range(300)]
    for value in second:
        producer.produce("failover", value)
    assert producer.flush(60) == 0
    for client, case in AFTER_FAILOVER.items():
        if client == "kcat" and shutil.which("kcat") is None:
            continue
        ROUNDTRIPS[client](secured, case, f"after-{client}")

    consumer = CKConsumer({**conf, "group.id": "failover", "enable.auto.commit": False})
    consumer.assign([CKTopicPartition("failover", p, 0) for p in range(3)])
    got: list[bytes] = []
    deadline = time.monotonic() + 40
    while len(got) < 600 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    assert sorted(got) == sorted(first + second)

    secured.cluster.brokers[leader].start()
    wait_until(
        lambda: _all_isrs_full(secured, ["failover"]), 60, "the restarted broker in the ISRs"
    )
