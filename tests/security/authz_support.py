"""What the authorization tests share: one broker with the ACL authorizer (`authz`, one per
test module), a super user `admin` and a principal `alice` with no ACL to start, helpers that
grant ACLs and look at side effects, and `Case`/`run_case`: an API's request is refused
without the ACLs it needs (and changes nothing), then succeeds once they are granted.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from riverlog.client.connection import Connection
from riverlog.client.security import ClientSecurity
from riverlog.protocol import messages as m
from riverlog.protocol.records.v2 import Record, encode_batch
from riverlog.security import acl
from tests.security.conftest import SecuredBroker, start_secured

TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED = 29, 30, 31, 53


@pytest.fixture(scope="module")
def authz(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    running = start_secured(
        tmp_path_factory.mktemp("authz"),
        **{
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin;User:ANONYMOUS",  # ANONYMOUS: the PLAINTEXT listener
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),OU=riverlog,.*$/$1/L,DEFAULT",
            "group.min.session.timeout.ms": "100",
            "offsets.topic.num.partitions": "1",
        },
    )
    try:
        yield running
    finally:
        running.embedded.stop()


async def _login(authz: SecuredBroker, user: str) -> Connection:
    security = ClientSecurity("SASL_PLAINTEXT", None, "PLAIN", user, f"{user}-secret")
    return await Connection.open("127.0.0.1", authz.ports["SASL_PLAINTEXT"], security=security)


@pytest.fixture
async def admin(authz: SecuredBroker) -> AsyncIterator[Connection]:
    conn = await _login(authz, "admin")
    yield conn
    await conn.close()


PRINCIPALS: dict[int, str] = {}


def principal(conn: Connection) -> str:
    return PRINCIPALS[id(conn)]


@pytest.fixture
async def alice(authz: SecuredBroker, admin: Connection) -> AsyncIterator[Connection]:
    """A new user per test (created with AlterUserScramCredentials) on SASL_SSL/SCRAM, so
    that no test sees another's ACLs."""
    name = f"alice-{uuid.uuid4().hex[:8]}"
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", b"alice-secret", salt, 4096)
    response = await admin.send(
        m.AlterUserScramCredentialsRequest(
            upsertions=[
                m.AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
                    name=name, mechanism=1, iterations=4096, salt=salt, salted_password=salted
                )
            ]
        )
    )
    assert isinstance(response, m.AlterUserScramCredentialsResponse)
    assert response.results[0].error_code == 0
    context = ssl.create_default_context(cafile=str(authz.certs.ca))
    security = ClientSecurity("SASL_SSL", context, "SCRAM-SHA-256", name, "alice-secret")
    conn = await Connection.open("127.0.0.1", authz.ports["SASL_SSL"], security=security)
    PRINCIPALS[id(conn)] = f"User:{name}"
    yield conn
    await conn.close()


async def grant(
    admin: Connection,
    kind: str,
    name: str,
    operation: str,
    principal: str,
    *,
    pattern: str = "LITERAL",
    permission: str = "Allow",
) -> None:
    response = await admin.send(
        m.CreateAclsRequest(
            creations=[
                m.CreateAclsRequest.AclCreation(
                    resource_type=acl.RESOURCE_TYPE_IDS[kind],
                    resource_name=name,
                    resource_pattern_type=acl.PATTERN_TYPE_IDS[pattern],
                    principal=principal,
                    host="*",
                    operation=acl.OPERATION_IDS[operation],
                    permission_type=acl.PERMISSION_IDS[permission],
                )
            ]
        )
    )
    assert isinstance(response, m.CreateAclsResponse)
    assert response.results[0].error_code == 0, response.results[0].error_message


async def create_topic(admin: Connection, name: str, partitions: int = 1) -> uuid.UUID:
    """Create `name` and wait until it has leaders; its id."""
    response = await admin.send(
        m.CreateTopicsRequest(
            timeout_ms=10_000,
            topics=[
                m.CreateTopicsRequest.CreatableTopic(
                    name=name, num_partitions=partitions, replication_factor=1
                )
            ],
        )
    )
    assert isinstance(response, m.CreateTopicsResponse)
    assert response.topics[0].error_code == 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        meta = await admin.send(
            m.MetadataRequest(
                topics=[m.MetadataRequest.MetadataRequestTopic(name=name)],
                allow_auto_topic_creation=False,
            )
        )
        assert isinstance(meta, m.MetadataResponse)
        parts = meta.topics[0].partitions
        if len(parts) == partitions and all(p.leader_id >= 0 for p in parts):
            return meta.topics[0].topic_id
        await asyncio.sleep(0.02)
    raise AssertionError(f"{name} has no leaders")


async def coordinator_ready(admin: Connection, group: str) -> None:
    """Wait until the group's coordinator answers (its offsets partition loaded)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = await admin.send(m.FindCoordinatorRequest(key_type=0, coordinator_keys=[group]))
        if found.coordinators[0].error_code == 0:  # type: ignore[attr-defined]
            described = await admin.send(m.DescribeGroupsRequest(groups=[group]))
            if described.groups[0].error_code not in (14, 15, 16):  # type: ignore[attr-defined]
                return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no coordinator for {group}")


async def end_offset(admin: Connection, topic: str) -> int:
    response = await admin.send(
        m.ListOffsetsRequest(
            replica_id=-1,
            topics=[
                m.ListOffsetsRequest.ListOffsetsTopic(
                    name=topic,
                    partitions=[
                        m.ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)
                    ],
                )
            ],
        )
    )
    assert isinstance(response, m.ListOffsetsResponse)
    return int(response.topics[0].partitions[0].offset)


async def topic_exists(admin: Connection, topic: str) -> bool:
    meta = await admin.send(
        m.MetadataRequest(
            topics=[m.MetadataRequest.MetadataRequestTopic(name=topic)],
            allow_auto_topic_creation=False,
        )
    )
    assert isinstance(meta, m.MetadataResponse)
    return bool(meta.topics[0].error_code == 0)


def produce_request(topic: str) -> m.ProduceRequest:
    batch = encode_batch([Record(0, int(time.time() * 1000), b"k", b"v")])
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


@dataclass
class Case:
    """One API: the ACL it needs, its request, and where its error code is."""

    api: str
    needs: tuple[str, str, str]  # (resource type, name key, operation)
    request: Callable[[dict[str, Any]], Any]
    error: Callable[[Any], int]
    denied: int
    unchanged: Callable[[Connection, dict[str, Any]], Any] | None = None
    version: int | None = None
    # further ACLs the API needs, each with the error answered while it is missing
    more: tuple[tuple[tuple[str, str, str], int], ...] = ()


def topic_request(
    cls: Any,
    topic_cls: Any,
    part_cls: Any,
    name_field: str = "name",
    parts_field: str = "partitions",
    **part: Any,
) -> Callable[[dict[str, str]], Any]:
    def make(names: dict[str, str]) -> Any:
        return cls(
            topics=[topic_cls(**{name_field: names["topic"], parts_field: [part_cls(**part)]})]
        )

    return make


async def no_records(admin: Connection, names: dict[str, str]) -> None:
    assert await end_offset(admin, names["topic"]) == 0


async def still_there(admin: Connection, names: dict[str, str]) -> None:
    assert await topic_exists(admin, names["topic"])


async def not_created(admin: Connection, names: dict[str, str]) -> None:
    assert not await topic_exists(admin, names["new"])


async def one_partition(admin: Connection, names: dict[str, str]) -> None:
    meta = await admin.send(
        m.MetadataRequest(
            topics=[m.MetadataRequest.MetadataRequestTopic(name=names["topic"])],
            allow_auto_topic_creation=False,
        )
    )
    assert len(meta.topics[0].partitions) == 1  # type: ignore[attr-defined]


async def config_unchanged(admin: Connection, names: dict[str, str]) -> None:
    response = await admin.send(
        m.DescribeConfigsRequest(
            resources=[
                m.DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=2,
                    resource_name=names["topic"],
                    configuration_keys=["retention.ms"],
                )
            ]
        )
    )
    value = response.results[0].configs[0].value  # type: ignore[attr-defined]
    assert value != "1234567"


async def no_commit(admin: Connection, names: dict[str, str]) -> None:
    response = await admin.send(
        m.OffsetFetchRequest(
            groups=[
                m.OffsetFetchRequest.OffsetFetchRequestGroup(group_id=names["group"], topics=None)
            ]
        )
    )
    assert not response.groups[0].topics  # type: ignore[attr-defined]


async def run_case(admin: Connection, alice: Connection, case: Case) -> None:
    """alice is refused without the case's ACLs (and nothing changes), then allowed."""
    suffix = uuid.uuid4().hex[:8]
    names: dict[str, Any] = {
        "topic": f"t-{suffix}",
        "new": f"new-{suffix}",
        "group": f"g-{suffix}",
        "txn": f"txn-{suffix}",
        "cluster": acl.CLUSTER_NAME,
    }
    topic_id = await create_topic(admin, names["topic"])
    await coordinator_ready(admin, names["group"])
    names["topic_id"] = topic_id
    denied = await alice.send(case.request(names), case.version, timeout_s=15)
    assert case.error(denied) == case.denied, f"{case.api} without the ACL"
    if case.unchanged is not None:
        await case.unchanged(admin, names)
    kind, key, operation = case.needs
    await grant(admin, kind, names[key], operation, principal(alice))
    for (kind, key, operation), missing in case.more:  # one ACL granted, the next missing
        half = await alice.send(case.request(names), case.version, timeout_s=15)
        assert case.error(half) == missing, f"{case.api} without {operation} on {kind}"
        if case.unchanged is not None:
            await case.unchanged(admin, names)
        await grant(admin, kind, names[key], operation, principal(alice))
    allowed = await alice.send(case.request(names), case.version, timeout_s=15)
    assert case.error(allowed) == 0, f"{case.api} with the ACL: {allowed!r}"
