"""Every client over every secured listener: confluent-kafka, kafka-python, aiokafka, kcat and
riverlog's client each produce and consume over SSL (with and without a client
certificate), SASL_PLAINTEXT/PLAIN and SASL_SSL/SCRAM-SHA-256 and -512 (issue 23)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from riverlog.client import AsyncConsumer, AsyncProducer
from tests.security.conftest import SecuredBroker

pytestmark = pytest.mark.timeout(60)

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


def _login(mechanism: str | None) -> tuple[str, str]:
    return ("alice", "alice-secret") if mechanism == "PLAIN" else ("bob", "bob-secret")


def _topic(secured: SecuredBroker, client: str) -> str:
    name = f"{client}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": secured.address("PLAINTEXT")})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)
    return name


def _values() -> list[bytes]:
    return [b"value-%d" % i for i in range(COUNT)]


def _librdkafka(
    secured: SecuredBroker, listener: str, mechanism: str | None, cert: bool
) -> dict[str, str]:
    conf = {"bootstrap.servers": secured.address(listener), "security.protocol": listener}
    if "SSL" in listener:
        conf["ssl.ca.location"] = str(secured.certs.ca)
    if cert:
        conf["ssl.certificate.location"] = str(secured.certs.client_cert)
        conf["ssl.key.location"] = str(secured.certs.client_key)
    if mechanism:
        user, password = _login(mechanism)
        conf |= {"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
    return conf


@pytest.mark.parametrize(("listener", "mechanism", "cert"), CASES, ids=IDS)
def test_confluent_kafka(
    secured: SecuredBroker, listener: str, mechanism: str | None, cert: bool
) -> None:
    topic = _topic(secured, "ck")
    conf = _librdkafka(secured, listener, mechanism, cert)
    producer = CKProducer(conf)
    for value in _values():
        producer.produce(topic, value)
    assert producer.flush(20) == 0
    consumer = CKConsumer({**conf, "group.id": "matrix", "enable.auto.commit": False})
    consumer.assign([CKTopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < COUNT and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    assert got == _values()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by ./dev setup")
@pytest.mark.parametrize(("listener", "mechanism", "cert"), CASES, ids=IDS)
def test_kcat(secured: SecuredBroker, listener: str, mechanism: str | None, cert: bool) -> None:
    topic = _topic(secured, "kcat")
    conf = _librdkafka(secured, listener, mechanism, cert)
    bootstrap = conf.pop("bootstrap.servers")
    if "sasl.mechanism" in conf:
        conf["sasl.mechanisms"] = conf.pop("sasl.mechanism")
    options = [arg for key, value in conf.items() for arg in ("-X", f"{key}={value}")]
    subprocess.run(
        ["kcat", "-P", "-b", bootstrap, "-t", topic, *options],
        input=b"\n".join(_values()),
        check=True,
        timeout=30,
    )
    out = subprocess.run(
        ["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", *options],
        capture_output=True,
        check=True,
        timeout=30,
    )
    assert out.stdout.splitlines() == _values()


def _kafka_python(
    secured: SecuredBroker, listener: str, mechanism: str | None, cert: bool
) -> dict[str, object]:
    conf: dict[str, object] = {
        "bootstrap_servers": secured.address(listener),
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
    return conf


@pytest.mark.parametrize(("listener", "mechanism", "cert"), CASES, ids=IDS)
def test_kafka_python(
    secured: SecuredBroker, listener: str, mechanism: str | None, cert: bool
) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    topic = _topic(secured, "kp")
    conf = _kafka_python(secured, listener, mechanism, cert)
    producer = KafkaProducer(**conf)
    for value in _values():
        producer.send(topic, value)
    producer.flush(20)
    producer.close(5)
    consumer = KafkaConsumer(**conf, consumer_timeout_ms=500)
    consumer.assign([KTopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < COUNT and time.monotonic() < deadline:
        for records in consumer.poll(500).values():
            got += [r.value for r in records]
    consumer.close()
    assert got == _values()


@pytest.mark.parametrize(("listener", "mechanism", "cert"), CASES, ids=IDS)
def test_aiokafka(secured: SecuredBroker, listener: str, mechanism: str | None, cert: bool) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context
    from aiokafka.structs import TopicPartition as ATopicPartition

    topic = _topic(secured, "aio")
    conf: dict[str, object] = {
        "bootstrap_servers": secured.address(listener),
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
        producer = AIOKafkaProducer(**conf)
        await producer.start()
        try:
            for value in _values():
                await producer.send(topic, value)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**conf, auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([ATopicPartition(topic, 0)])
            got: list[bytes] = []
            async with asyncio.timeout(20):
                while len(got) < COUNT:
                    batches = await consumer.getmany(timeout_ms=500)
                    got += [r.value for rs in batches.values() for r in rs]
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == _values()


@pytest.mark.parametrize(("listener", "mechanism", "cert"), CASES, ids=IDS)
async def test_riverlog_client(
    secured: SecuredBroker, listener: str, mechanism: str | None, cert: bool
) -> None:
    topic = _topic(secured, "rl")
    conf: dict[str, object] = {
        "bootstrap.servers": secured.address(listener),
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
    async with AsyncProducer(conf) as producer:
        for value in _values():
            await producer.send(topic, value)
    consumer = AsyncConsumer(conf)
    consumer.assign([(topic, 0)])
    consumer.seek_to_beginning()
    got: list[bytes] = []
    async with consumer:
        async with asyncio.timeout(20):
            while len(got) < COUNT:
                got += [bytes(r.value) for r in await consumer.poll(500) if r.value is not None]
    assert got == _values()
