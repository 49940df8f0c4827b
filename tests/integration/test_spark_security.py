"""`format("riverlog")` on local[2] Spark against secured listeners (issue 23): writes and reads
a SASL_SSL topic with Spark's Kafka option names (`kafka.security.protocol`, `kafka.ssl.*`,
`kafka.sasl.*`), reads over SSL with a client certificate (`kafka.ssl.keystore.*`), and a wrong
password fails the query on the driver with an authentication error instead of hanging.

The broker is tests/security's: every kind of listener, users `bob` (SCRAM) and `alice`
(PLAIN), no authorizer."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from riverlog.client import Admin
from tests.security.conftest import SecuredBroker, start_secured

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    running = start_secured(tmp_path_factory.mktemp("spark-secured"))
    try:
        yield running
    finally:
        running.embedded.stop()


def sasl_ssl_options(secured: SecuredBroker, password: str = "bob-secret") -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": secured.address("SASL_SSL"),
        "kafka.security.protocol": "SASL_SSL",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(secured.certs.ca),
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="bob" password="{password}";'
        ),
    }


def with_options(builder: Any, options: dict[str, str]) -> Any:
    for key, value in options.items():
        builder = builder.option(key, value)
    return builder


def test_write_and_read_a_sasl_ssl_topic(spark: Any, secured: SecuredBroker) -> None:
    with Admin({"bootstrap.servers": secured.address("PLAINTEXT")}) as admin:
        admin.create_topic("secured-spark", 2)
    rows = [(f"k{i}", f"v{i}".encode(), i % 2) for i in range(200)]
    df = spark.createDataFrame(rows, "key string, value binary, partition int")
    writer = df.write.mode("append").format("riverlog").option("topic", "secured-spark")
    with_options(writer, sasl_ssl_options(secured)).save()

    reader = spark.read.format("riverlog").option("subscribe", "secured-spark")
    back = with_options(reader, sasl_ssl_options(secured)).load().collect()
    assert sorted((bytes(r.key).decode(), bytes(r.value), r.partition) for r in back) == sorted(
        rows
    )

    # The same records over SSL with a client certificate (Kafka's keystore keys)
    ssl_options = {
        "kafka.bootstrap.servers": secured.address("SSL"),
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(secured.certs.ca),
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.keystore.location": str(secured.certs.client),
    }
    reader = spark.read.format("riverlog").option("subscribe", "secured-spark")
    assert with_options(reader, ssl_options).load().count() == len(rows)


def test_a_wrong_password_fails_the_query(spark: Any, secured: SecuredBroker) -> None:
    reader = spark.read.format("riverlog").option("subscribe", "secured-spark")
    with pytest.raises(Exception, match=r"(?i)authentication"):
        with_options(reader, sasl_ssl_options(secured, password="wrong")).load().collect()
