"""`riverlog cluster up --security`: a development cluster with Kafka's security on.

Every broker listens with SASL_SSL only (on its usual port), brokers talk to each other over
it as `admin` with SCRAM-SHA-512, and the ACL authorizer is on with `User:admin` as the only
super user. A throwaway CA (trustme) signs the brokers' certificate for 127.0.0.1/localhost;
the admin's SCRAM credential is written to ZooKeeper before the brokers start (as Kafka's
`kafka-configs.sh --zookeeper` bootstrap does). The tools' settings go to
`DIR/client.properties` (`--command-config`); the CA to `DIR/certs/ca.pem`.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from riverlog.devcluster import BrokerProcess
from riverlog.metadata.zookeeper import ZooKeeperStore
from riverlog.security import scram_credentials
from riverlog.security.dev_certs import write_dev_certs

MECHANISM = "SCRAM-SHA-512"
ADMIN = "admin"


def _jaas(password: str) -> str:
    return (
        f"org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{ADMIN}" password="{password}";'
    )


def prepare(directory: Path, zk_connect: str, brokers: list[BrokerProcess]) -> Path:
    """Certificates, the admin credential and each broker's settings; the client config."""
    certs = write_dev_certs(directory / "certs")
    password = secrets.token_urlsafe(18)
    store = ZooKeeperStore(zk_connect)
    try:
        credential = scram_credentials.make(MECHANISM, password, 4096)
        scram_credentials.store_credential(store, ADMIN, MECHANISM, credential)
    finally:
        store.close()
    for broker in brokers:
        broker.settings = {
            **broker.settings,
            "listeners": f"SASL_SSL://127.0.0.1:{broker.port}",
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config": _jaas(password),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs.broker),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(certs.ca),
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": f"User:{ADMIN}",
        }
    client = directory / "client.properties"
    client.write_text(
        "security.protocol=SASL_SSL\n"
        f"sasl.mechanism={MECHANISM}\n"
        f"sasl.jaas.config={_jaas(password)}\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={certs.ca}\n"
    )
    client.chmod(0o600)
    return client
