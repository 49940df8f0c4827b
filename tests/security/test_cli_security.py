"""`riverlog acls` (kafka-acls.sh) and `riverlog configs --entity-type users`
(kafka-configs.sh) against a secured broker, through `--command-config`."""

from __future__ import annotations

import asyncio
import io
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from riverlog.cli.main import main
from riverlog.client.connection import Connection
from riverlog.client.security import ClientSecurity
from riverlog.protocol.messages import MetadataRequest, MetadataResponse
from tests.security.conftest import PLAIN_JAAS, SecuredBroker, start_secured

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    running = start_secured(
        tmp_path_factory.mktemp("cli"),
        **{
            "authorizer.class.name": "riverlog.security.AclAuthorizer",
            "super.users": "User:admin",
            # the broker talks to itself (controller → broker) as admin, over SASL
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
        },
    )
    try:
        yield running
    finally:
        running.embedded.stop()


@pytest.fixture
def admin_config(broker: SecuredBroker, tmp_path: Path) -> list[str]:
    path = tmp_path / "admin.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret";\n'
    )
    assert "user_admin" in PLAIN_JAAS
    return ["--bootstrap-server", broker.address("SASL_PLAINTEXT"), "--command-config", str(path)]


def test_scram_users_are_managed_with_kafka_configs_syntax(
    broker: SecuredBroker, admin_config: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(
            [
                "configs",
                *admin_config,
                "--entity-type",
                "users",
                "--entity-name",
                "carol",
                "--alter",
                "--add-config",
                "SCRAM-SHA-256=[iterations=8192,password=carol-secret],"
                "SCRAM-SHA-512=[password=carol-secret]",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out == "Completed updating config for user carol.\n"
    assert (
        main(
            [
                "configs",
                *admin_config,
                "--entity-type",
                "users",
                "--entity-name",
                "carol",
                "--describe",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out == (
        "SCRAM credential configs for user-principal 'carol' are "
        "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096\n"
    )

    async def login(mechanism: str) -> None:
        context = ssl.create_default_context(cafile=str(broker.certs.ca))
        security = ClientSecurity("SASL_SSL", context, mechanism, "carol", "carol-secret")
        conn = await Connection.open("127.0.0.1", broker.ports["SASL_SSL"], security=security)
        try:
            assert isinstance(await conn.send(MetadataRequest(topics=[])), MetadataResponse)
        finally:
            await conn.close()

    asyncio.run(login("SCRAM-SHA-256"))
    asyncio.run(login("SCRAM-SHA-512"))
    assert (
        main(
            [
                "configs",
                *admin_config,
                "--entity-type",
                "users",
                "--entity-name",
                "carol",
                "--alter",
                "--delete-config",
                "SCRAM-SHA-512",
            ]
        )
        == 0
    )
    capsys.readouterr()
    with pytest.raises(ConnectionError, match="invalid credentials"):
        asyncio.run(login("SCRAM-SHA-512"))


def test_acls_tool_adds_lists_and_removes_like_kafka_acls(
    admin_config: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(
            [
                "acls",
                *admin_config,
                "--add",
                "--allow-principal",
                "User:dave",
                "--operation",
                "Read",
                "--operation",
                "Describe",
                "--topic",
                "orders",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    pattern = "ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)"
    read = "(principal=User:dave, host=*, operation=READ, permissionType=ALLOW)"
    describe = "(principal=User:dave, host=*, operation=DESCRIBE, permissionType=ALLOW)"
    assert out.startswith(f"Adding ACLs for resource `{pattern}`: \n \t{read}\n\t{describe} \n")
    assert f"Current ACLs for resource `{pattern}`: \n" in out

    assert (
        main(
            [
                "acls",
                *admin_config,
                "--add",
                "--allow-principal",
                "User:erin",
                "--consumer",
                "--topic",
                "pay",
                "--group",
                "billing",
                "--resource-pattern-type",
                "prefixed",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert (
        main(
            [
                "acls",
                *admin_config,
                "--list",
                "--topic",
                "pay",
                "--resource-pattern-type",
                "prefixed",
            ]
        )
        == 0
    )
    listed = capsys.readouterr().out
    assert "ResourcePattern(resourceType=TOPIC, name=pay, patternType=PREFIXED)" in listed
    assert "operation=READ" in listed and "operation=DESCRIBE" in listed
    assert main(["acls", *admin_config, "--list", "--principal", "User:erin"]) == 0
    by_principal = capsys.readouterr().out
    assert "name=billing, patternType=PREFIXED" in by_principal and "dave" not in by_principal

    assert main(["acls", *admin_config, "--remove", "--force", "--topic", "orders"]) == 0
    capsys.readouterr()
    assert main(["acls", *admin_config, "--list", "--topic", "orders"]) == 0
    assert capsys.readouterr().out == ""


def test_acls_tool_errors_exit_1(
    admin_config: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["acls", *admin_config, "--add", "--topic", "x"]) == 1
    assert "--allow-principal" in capsys.readouterr().err
    assert main(["acls", *admin_config, "--list", "--add"]) == 1


def test_console_tools_take_their_config_files(
    admin_config: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bootstrap, path = admin_config[1], admin_config[3]
    monkeypatch.setattr("sys.stdin", io.StringIO("one\ntwo\n"))
    assert (
        main(
            [
                "console-producer",
                "--bootstrap-server",
                bootstrap,
                "--topic",
                "console",
                "--producer.config",
                path,
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "console-consumer",
                "--bootstrap-server",
                bootstrap,
                "--topic",
                "console",
                "--from-beginning",
                "--max-messages",
                "2",
                "--timeout-ms",
                "20000",
                "--consumer.config",
                path,
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.splitlines()[:2] == ["one", "two"]


def test_transactions_and_leader_election_read_java_properties(
    broker: SecuredBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Their config files are Java properties, as every tool's: `key: value`, a JAAS line
    continued with a trailing backslash."""
    path = tmp_path / "admin-java.properties"
    path.write_text(
        "security.protocol: SASL_PLAINTEXT\nsasl.mechanism = PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        '    username="admin" password="admin-secret";\n'
    )
    bootstrap = broker.address("SASL_PLAINTEXT")
    assert (
        main(
            ["transactions", "--bootstrap-server", bootstrap, "--command-config", str(path), "list"]
        )
        == 0
    )
    assert capsys.readouterr().out.startswith("TransactionalId")
    election = [
        "leader-election",
        "--bootstrap-server",
        bootstrap,
        "--admin.config",
        str(path),
        "--election-type",
        "preferred",
        "--all-topic-partitions",
    ]
    assert main(election) == 0
    capsys.readouterr()
