"""A broker with every kind of listener, and the settings each client needs for each.

One embedded broker (module scope) listens on PLAINTEXT (set-up), SSL (client certificates
requested: clients with and without one), SASL_PLAINTEXT (PLAIN) and SASL_SSL (PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512), with a throwaway CA (trustme). Users: `alice` (PLAIN, from
the JAAS line) and `bob` (SCRAM, stored as Kafka stores credentials).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from riverlog.embedded import EmbeddedBroker
from riverlog.security import scram_credentials
from riverlog.security.dev_certs import DevCerts, write_dev_certs

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" '  # the broker's own login (inter-broker)
    'user_alice="alice-secret" user_admin="admin-secret";'
)


@dataclass
class SecuredBroker:
    embedded: EmbeddedBroker
    certs: DevCerts
    ports: dict[str, int]

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


def secured_properties(certs: DevCerts, **extra: str) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,"
        "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs.broker),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca),
        "ssl.client.auth": "requested",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "num.partitions": "1",
        **extra,
    }


def start_secured(directory: Path, **extra: str) -> SecuredBroker:
    certs = write_dev_certs(directory / "certs")
    embedded = EmbeddedBroker(directory / "data", secured_properties(certs, **extra)).start()
    broker = embedded.broker
    assert broker is not None
    for mechanism in scram_credentials.MECHANISMS:
        credential = scram_credentials.make(mechanism, "bob-secret", 4096)
        scram_credentials.store_credential(broker.store, "bob", mechanism, credential)
    ports = {n.listener_name: n.port for n in broker.networks}
    return SecuredBroker(embedded, certs, ports)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    running = start_secured(tmp_path_factory.mktemp("secured"))
    try:
        yield running
    finally:
        running.embedded.stop()
