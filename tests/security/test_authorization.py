"""The authorization matrix (issue 23): for each API the broker serves, a principal without
the ACL it needs gets Kafka's error and changes nothing; with the ACL, it succeeds.

One broker with the ACL authorizer on a SASL_PLAINTEXT listener: `admin` is a super user
(it grants ACLs with CreateAcls and checks side effects), `alice` starts with no ACL. Each
case names the ACL it needs; `alice` is refused first, the ACL is created, then she
succeeds. Also: ACL tools' wire APIs round-trip, Metadata and ListGroups hide what she may
not describe, prefixed and deny ACLs, and TLS client-certificate principals.
"""

from __future__ import annotations

import ssl
import uuid
from pathlib import Path

import pytest

from riverlog.client.connection import Connection
from riverlog.client.security import ClientSecurity
from riverlog.protocol import messages as m
from riverlog.security import acl
from tests.security.authz_support import (
    CLUSTER_DENIED,
    GROUP_DENIED,
    TOPIC_DENIED,
    Case,
    admin,
    alice,
    authz,
    config_unchanged,
    coordinator_ready,
    create_topic,
    grant,
    no_commit,
    no_records,
    not_created,
    one_partition,
    principal,
    produce_request,
    run_case,
    still_there,
    topic_exists,
    topic_request,
)
from tests.security.conftest import SecuredBroker

__all__ = ["admin", "alice", "authz"]  # the fixtures

pytestmark = pytest.mark.timeout(90)


CASES = [
    Case(
        "Produce",
        ("Topic", "topic", "Write"),
        lambda n: produce_request(n["topic"]),
        lambda r: r.responses[0].partition_responses[0].error_code,
        TOPIC_DENIED,
        no_records,
    ),
    Case(
        "Fetch",
        ("Topic", "topic", "Read"),
        lambda n: m.FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=1 << 20,
            session_epoch=-1,
            topics=[
                m.FetchRequest.FetchTopic(
                    topic=n["topic"],
                    topic_id=n["topic_id"],
                    partitions=[
                        m.FetchRequest.FetchPartition(
                            partition=0, fetch_offset=0, partition_max_bytes=1 << 20
                        )
                    ],
                )
            ],
        ),
        lambda r: r.responses[0].partitions[0].error_code,
        TOPIC_DENIED,
    ),
    Case(
        "ListOffsets",
        ("Topic", "topic", "Describe"),
        topic_request(
            m.ListOffsetsRequest,
            m.ListOffsetsRequest.ListOffsetsTopic,
            m.ListOffsetsRequest.ListOffsetsPartition,
            partition_index=0,
            timestamp=-1,
        ),
        lambda r: r.topics[0].partitions[0].error_code,
        TOPIC_DENIED,
    ),
    Case(
        "OffsetForLeaderEpoch",
        ("Topic", "topic", "Describe"),
        topic_request(
            m.OffsetForLeaderEpochRequest,
            m.OffsetForLeaderEpochRequest.OffsetForLeaderTopic,
            m.OffsetForLeaderEpochRequest.OffsetForLeaderPartition,
            name_field="topic",
            partition=0,
            leader_epoch=0,
            current_leader_epoch=-1,
        ),
        lambda r: r.topics[0].partitions[0].error_code,
        TOPIC_DENIED,
    ),
    Case(
        "Metadata",
        ("Topic", "topic", "Describe"),
        lambda n: m.MetadataRequest(
            topics=[m.MetadataRequest.MetadataRequestTopic(name=n["topic"])],
            allow_auto_topic_creation=False,
        ),
        lambda r: r.topics[0].error_code,
        TOPIC_DENIED,
    ),
    Case(
        "CreateTopics",
        ("Topic", "new", "Create"),
        lambda n: m.CreateTopicsRequest(
            timeout_ms=5000,
            topics=[
                m.CreateTopicsRequest.CreatableTopic(
                    name=n["new"], num_partitions=1, replication_factor=1
                )
            ],
        ),
        lambda r: r.topics[0].error_code,
        TOPIC_DENIED,
        not_created,
    ),
    Case(
        "DeleteRecords",
        ("Topic", "topic", "Delete"),
        topic_request(
            m.DeleteRecordsRequest,
            m.DeleteRecordsRequest.DeleteRecordsTopic,
            m.DeleteRecordsRequest.DeleteRecordsPartition,
            partition_index=0,
            offset=0,
        ),
        lambda r: r.topics[0].partitions[0].error_code,
        TOPIC_DENIED,
    ),
    Case(
        "CreatePartitions",
        ("Topic", "topic", "Alter"),
        lambda n: m.CreatePartitionsRequest(
            timeout_ms=5000,
            topics=[m.CreatePartitionsRequest.CreatePartitionsTopic(name=n["topic"], count=2)],
        ),
        lambda r: r.results[0].error_code,
        TOPIC_DENIED,
        one_partition,
    ),
    Case(
        "DescribeConfigs",
        ("Topic", "topic", "DescribeConfigs"),
        lambda n: m.DescribeConfigsRequest(
            resources=[
                m.DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=2, resource_name=n["topic"]
                )
            ]
        ),
        lambda r: r.results[0].error_code,
        TOPIC_DENIED,
    ),
    Case(
        "IncrementalAlterConfigs",
        ("Topic", "topic", "AlterConfigs"),
        lambda n: m.IncrementalAlterConfigsRequest(
            resources=[
                m.IncrementalAlterConfigsRequest.AlterConfigsResource(
                    resource_type=2,
                    resource_name=n["topic"],
                    configs=[
                        m.IncrementalAlterConfigsRequest.AlterableConfig(
                            name="retention.ms", config_operation=0, value="1234567"
                        )
                    ],
                )
            ]
        ),
        lambda r: r.responses[0].error_code,
        TOPIC_DENIED,
        config_unchanged,
    ),
    Case(
        "DeleteTopics",
        ("Topic", "topic", "Delete"),
        lambda n: m.DeleteTopicsRequest(
            timeout_ms=5000,
            topic_names=[n["topic"]],
            topics=[m.DeleteTopicsRequest.DeleteTopicState(name=n["topic"])],
        ),
        lambda r: r.responses[0].error_code,
        TOPIC_DENIED,
        still_there,
    ),
    Case(
        "OffsetCommit",
        ("Group", "group", "Read"),
        lambda n: m.OffsetCommitRequest(
            group_id=n["group"],
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                m.OffsetCommitRequest.OffsetCommitRequestTopic(
                    name=n["topic"],
                    partitions=[
                        m.OffsetCommitRequest.OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=0
                        )
                    ],
                )
            ],
        ),
        lambda r: r.topics[0].partitions[0].error_code,
        GROUP_DENIED,
        no_commit,
        more=((("Topic", "topic", "Read"), TOPIC_DENIED),),
    ),
    Case(
        "OffsetFetch",
        ("Group", "group", "Describe"),
        lambda n: m.OffsetFetchRequest(
            groups=[m.OffsetFetchRequest.OffsetFetchRequestGroup(group_id=n["group"], topics=None)]
        ),
        lambda r: r.groups[0].error_code,
        GROUP_DENIED,
    ),
    Case(
        "JoinGroup",
        ("Group", "group", "Read"),
        lambda n: m.JoinGroupRequest(
            group_id=n["group"],
            session_timeout_ms=6000,
            rebalance_timeout_ms=100,
            member_id="",
            protocol_type="consumer",
            protocols=[m.JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
        ),
        lambda r: r.error_code if r.error_code != 79 else 0,
        GROUP_DENIED,
    ),
    Case(
        "DescribeGroups",
        ("Group", "group", "Describe"),
        lambda n: m.DescribeGroupsRequest(groups=[n["group"]]),
        lambda r: r.groups[0].error_code,
        GROUP_DENIED,
    ),
    Case(
        "DeleteGroups",
        ("Group", "group", "Delete"),
        lambda n: m.DeleteGroupsRequest(groups_names=[n["group"]]),
        lambda r: r.results[0].error_code if r.results[0].error_code != 69 else 0,
        GROUP_DENIED,
    ),
    Case(
        "FindCoordinator",
        ("Group", "group", "Describe"),
        lambda n: m.FindCoordinatorRequest(key_type=0, coordinator_keys=[n["group"]]),
        lambda r: r.coordinators[0].error_code,
        GROUP_DENIED,
    ),
    Case(
        "InitProducerId",
        ("Cluster", "cluster", "IdempotentWrite"),
        lambda n: m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000),
        lambda r: r.error_code,
        CLUSTER_DENIED,
    ),
    Case(
        "DescribeLogDirs",
        ("Cluster", "cluster", "Describe"),
        lambda n: m.DescribeLogDirsRequest(topics=None),
        lambda r: r.error_code,
        CLUSTER_DENIED,
    ),
    Case(
        "AlterReplicaLogDirs",
        ("Cluster", "cluster", "Alter"),
        lambda n: m.AlterReplicaLogDirsRequest(
            dirs=[
                m.AlterReplicaLogDirsRequest.AlterReplicaLogDir(
                    path="/not-a-log-dir",
                    topics=[
                        m.AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic(
                            name=n["topic"], partitions=[0]
                        )
                    ],
                )
            ]
        ),
        lambda r: 0 if (c := r.results[0].partitions[0].error_code) == 57 else c,  # allowed
        CLUSTER_DENIED,
    ),
    Case(
        "ListPartitionReassignments",
        ("Cluster", "cluster", "Describe"),
        lambda n: m.ListPartitionReassignmentsRequest(timeout_ms=5000, topics=None),
        lambda r: r.error_code,
        CLUSTER_DENIED,
    ),
    Case(
        "ElectLeaders",
        ("Cluster", "cluster", "Alter"),
        lambda n: m.ElectLeadersRequest(election_type=0, timeout_ms=5000, topic_partitions=[]),
        lambda r: r.error_code,
        CLUSTER_DENIED,
    ),
    Case(
        "DescribeAcls",
        ("Cluster", "cluster", "Describe"),
        lambda n: m.DescribeAclsRequest(
            resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
        ),
        lambda r: r.error_code,
        CLUSTER_DENIED,
    ),
    Case(
        "DescribeUserScramCredentials",
        ("Cluster", "cluster", "Describe"),
        lambda n: m.DescribeUserScramCredentialsRequest(users=None),
        lambda r: r.error_code,
        CLUSTER_DENIED,
    ),
    Case(
        "UpdateMetadata",
        ("Cluster", "cluster", "ClusterAction"),
        lambda n: m.UpdateMetadataRequest(controller_id=0, controller_epoch=0),
        lambda r: r.error_code if r.error_code != 11 else 0,
        CLUSTER_DENIED,
    ),
    Case(
        "StopReplica",
        ("Cluster", "cluster", "ClusterAction"),
        lambda n: m.StopReplicaRequest(
            controller_id=0,
            controller_epoch=0,
            topic_states=[
                m.StopReplicaRequest.StopReplicaTopicState(
                    topic_name=n["topic"],
                    partition_states=[
                        m.StopReplicaRequest.StopReplicaPartitionState(
                            partition_index=0, delete_partition=True
                        )
                    ],
                )
            ],
        ),
        lambda r: r.error_code if r.error_code != 11 else 0,
        CLUSTER_DENIED,
        still_there,
    ),
    Case(
        "LeaderAndIsr",
        ("Cluster", "cluster", "ClusterAction"),
        lambda n: m.LeaderAndIsrRequest(controller_id=0, controller_epoch=0),
        lambda r: r.error_code if r.error_code != 11 else 0,
        CLUSTER_DENIED,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.api for c in CASES])
async def test_each_api_needs_its_acl(admin: Connection, alice: Connection, case: Case) -> None:
    await run_case(admin, alice, case)


async def test_an_idempotent_producer_may_start_with_write_on_any_topic(
    admin: Connection, alice: Connection
) -> None:
    """KIP-679 (Kafka 2.8+): InitProducerId without a transactional id needs IdempotentWrite
    on the cluster or Write on some topic — kafka-python 3 and librdkafka producers are
    idempotent by default, and their users hold topic ACLs only."""
    request = m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000)
    denied = await alice.send(request)
    assert isinstance(denied, m.InitProducerIdResponse) and denied.error_code == CLUSTER_DENIED
    suffix = uuid.uuid4().hex[:8]
    await grant(admin, "Topic", f"events-{suffix}", "Write", principal(alice), pattern="PREFIXED")
    allowed = await alice.send(request)
    assert isinstance(allowed, m.InitProducerIdResponse) and allowed.error_code == 0
    assert allowed.producer_id >= 0
    await grant(
        admin, "Topic", "events-", "Write", principal(alice), permission="Deny", pattern="PREFIXED"
    )
    covered = await alice.send(request)
    assert isinstance(covered, m.InitProducerIdResponse) and covered.error_code == CLUSTER_DENIED


async def test_metadata_and_list_groups_hide_what_is_not_describable(
    admin: Connection, alice: Connection
) -> None:
    suffix = uuid.uuid4().hex[:8]
    visible, hidden = f"visible-{suffix}", f"hidden-{suffix}"
    await create_topic(admin, visible)
    await create_topic(admin, hidden)
    await grant(
        admin, "Topic", f"visible-{suffix[:4]}", "Describe", principal(alice), pattern="PREFIXED"
    )
    meta = await alice.send(m.MetadataRequest(topics=None))
    assert isinstance(meta, m.MetadataResponse)
    names = {t.name for t in meta.topics}
    assert visible in names and hidden not in names
    everything = await admin.send(m.MetadataRequest(topics=None))
    assert {visible, hidden} <= {t.name for t in everything.topics}  # type: ignore[attr-defined]
    # auto-creation needs Create: refused, and nothing created
    unborn = f"visible-{suffix}-new"
    asked = await alice.send(
        m.MetadataRequest(
            topics=[m.MetadataRequest.MetadataRequestTopic(name=unborn)],
            allow_auto_topic_creation=True,
        )
    )
    assert [(t.name, t.error_code) for t in asked.topics] == [(unborn, TOPIC_DENIED)]  # type: ignore[attr-defined]
    assert not await topic_exists(admin, unborn)
    # v0, where an empty list means every topic: only the denied topic is answered
    old = await alice.send(
        m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name=hidden)]), 0
    )
    assert [(t.name, t.error_code) for t in old.topics] == [(hidden, TOPIC_DENIED)]  # type: ignore[attr-defined]
    # a DENY beats the prefixed ALLOW
    await grant(admin, "Topic", visible, "Describe", principal(alice), permission="Deny")
    meta = await alice.send(m.MetadataRequest(topics=None))
    assert visible not in {t.name for t in meta.topics}  # type: ignore[attr-defined]

    group = f"listed-{suffix}"
    await coordinator_ready(admin, group)
    await admin.send(
        m.OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                m.OffsetCommitRequest.OffsetCommitRequestTopic(
                    name=hidden,
                    partitions=[
                        m.OffsetCommitRequest.OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=0
                        )
                    ],
                )
            ],
        )
    )
    listed = await alice.send(m.ListGroupsRequest())
    assert group not in {g.group_id for g in listed.groups}  # type: ignore[attr-defined]
    await grant(admin, "Group", group, "Describe", principal(alice))
    listed = await alice.send(m.ListGroupsRequest())
    assert group in {g.group_id for g in listed.groups}  # type: ignore[attr-defined]


async def test_acl_apis_round_trip_and_deletes_apply_at_once(
    admin: Connection, alice: Connection
) -> None:
    topic = f"acl-{uuid.uuid4().hex[:8]}"
    await create_topic(admin, topic)
    await grant(admin, "Topic", topic, "Write", principal(alice))
    described = await admin.send(
        m.DescribeAclsRequest(
            resource_type_filter=2,
            resource_name_filter=topic,
            pattern_type_filter=3,
            principal_filter=None,
            host_filter=None,
            operation=1,
            permission_type=1,
        )
    )
    assert isinstance(described, m.DescribeAclsResponse)
    [resource] = described.resources
    assert [(a.principal, a.operation, a.permission_type) for a in resource.acls] == [
        (principal(alice), acl.OPERATION_IDS["Write"], acl.PERMISSION_IDS["Allow"])
    ]
    produced = await alice.send(produce_request(topic))
    assert produced.responses[0].partition_responses[0].error_code == 0  # type: ignore[attr-defined]
    deleted = await admin.send(
        m.DeleteAclsRequest(
            filters=[
                m.DeleteAclsRequest.DeleteAclsFilter(
                    resource_type_filter=2,
                    resource_name_filter=topic,
                    pattern_type_filter=3,
                    principal_filter=None,
                    host_filter=None,
                    operation=1,
                    permission_type=1,
                )
            ]
        )
    )
    assert len(deleted.filter_results[0].matching_acls) == 1  # type: ignore[attr-defined]
    refused = await alice.send(produce_request(topic))
    assert refused.responses[0].partition_responses[0].error_code == TOPIC_DENIED  # type: ignore[attr-defined]
    # alice may not manage ACLs herself
    mine = await alice.send(
        m.CreateAclsRequest(
            creations=[
                m.CreateAclsRequest.AclCreation(
                    resource_type=2,
                    resource_name=topic,
                    resource_pattern_type=3,
                    principal=principal(alice),
                    host="*",
                    operation=2,
                    permission_type=3,
                )
            ]
        )
    )
    assert mine.results[0].error_code == CLUSTER_DENIED  # type: ignore[attr-defined]


async def test_the_certificate_subject_is_the_principal(
    authz: SecuredBroker, admin: Connection
) -> None:
    """`CN=client,OU=riverlog` maps to `client` by the configured rule."""
    topic = f"cert-{uuid.uuid4().hex[:8]}"
    await create_topic(admin, topic)
    context = ssl.create_default_context(cafile=str(authz.certs.ca))
    context.load_cert_chain(str(authz.certs.client))
    conn = await Connection.open(
        "127.0.0.1", authz.ports["SSL"], security=ClientSecurity("SSL", context)
    )
    try:
        refused = await conn.send(produce_request(topic))
        assert refused.responses[0].partition_responses[0].error_code == TOPIC_DENIED  # type: ignore[attr-defined]
        await grant(admin, "Topic", topic, "Write", principal="User:client")
        done = await conn.send(produce_request(topic))
        assert done.responses[0].partition_responses[0].error_code == 0  # type: ignore[attr-defined]
    finally:
        await conn.close()


def test_acls_are_stored_as_kafka_stores_them(authz: SecuredBroker, tmp_path: Path) -> None:
    broker = authz.embedded.broker
    assert broker is not None
    paths = broker.store.children("/kafka-acl/Topic")
    assert paths
    data = broker.store.get(f"/kafka-acl/Topic/{paths[0]}").data
    assert data.startswith(b'{"version":1,"acls":[{"principal":"User:')
    assert broker.store.children("/kafka-acl-changes")
    assert broker.store.children("/kafka-acl-extended/prefixed/Topic")


async def test_offset_fetch_answers_topics_she_may_not_describe_as_kafka(
    admin: Connection, alice: Connection
) -> None:
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"secret-{suffix}", f"reader-{suffix}"
    await create_topic(admin, topic)
    await coordinator_ready(admin, group)
    committed = await admin.send(
        m.OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                m.OffsetCommitRequest.OffsetCommitRequestTopic(
                    name=topic,
                    partitions=[
                        m.OffsetCommitRequest.OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=7
                        )
                    ],
                )
            ],
        )
    )
    assert committed.topics[0].partitions[0].error_code == 0  # type: ignore[attr-defined]
    await grant(admin, "Group", group, "Describe", principal(alice))
    Group = m.OffsetFetchRequest.OffsetFetchRequestGroup
    everything = await alice.send(m.OffsetFetchRequest(groups=[Group(group_id=group, topics=None)]))
    assert everything.groups[0].topics == []  # type: ignore[attr-defined]
    named = await alice.send(
        m.OffsetFetchRequest(
            groups=[
                Group(
                    group_id=group,
                    topics=[
                        m.OffsetFetchRequest.OffsetFetchRequestTopics(
                            name=topic, partition_indexes=[0]
                        )
                    ],
                )
            ]
        )
    )
    [answer] = named.groups[0].topics  # type: ignore[attr-defined]
    assert answer.partitions[0].error_code == TOPIC_DENIED
    assert answer.partitions[0].committed_offset == -1
    await grant(admin, "Topic", topic, "Describe", principal(alice))
    allowed = await alice.send(m.OffsetFetchRequest(groups=[Group(group_id=group, topics=None)]))
    assert allowed.groups[0].topics[0].partitions[0].committed_offset == 7  # type: ignore[attr-defined]
