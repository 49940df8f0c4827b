"""Transactions under the ACL authorizer (issue 23): real transactional clients need
exactly Kafka's ACLs (`riverlog acls --producer --transactional-id` grants them), a forged
WriteTxnMarkers from a principal without ClusterAction writes nothing, ListTransactions and
DescribeTransactions show only what the principal may describe, and no API the broker
serves is left without an authorization rule.

The authorization matrix's rows for the eight transaction APIs are here (refused without
each ACL they need, with no side effect; past authorization with it); this module shares
test_authorization.py's broker set-up and its `run_case`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as CKProducer

from riverlog.cli.main import main
from riverlog.client.connection import Connection
from riverlog.protocol import messages as m
from riverlog.security import acl, authorization
from riverlog.security.api_rules import HANDLER_CHECKED, RULES
from riverlog.server.dispatch import Dispatcher
from riverlog.server.handlers import HANDLERS
from tests.security.authz_support import (
    CLUSTER_DENIED,
    GROUP_DENIED,
    TOPIC_DENIED,
    TXN_DENIED,
    Case,
    admin,
    alice,
    authz,
    create_topic,
    end_offset,
    grant,
    no_commit,
    principal,
    run_case,
)
from tests.security.conftest import SecuredBroker

__all__ = ["admin", "alice", "authz"]  # the fixtures, shared with the matrix

pytestmark = pytest.mark.timeout(90)

AUTHORIZATION_ERRORS = {TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED}


def past_authorization(code: int) -> int:
    """0 for any answer but an authorization error: for the transaction APIs, which the
    coordinator answers with its own errors for a transaction that does not exist (their
    success with real clients: test_transactional_clients_need_kafkas_acls)."""
    return code if code in AUTHORIZATION_ERRORS else 0


async def _no_marker(admin: Connection, names: dict[str, str]) -> None:
    """A marker is a control batch: it would move the end offset."""
    assert await end_offset(admin, names["topic"]) == 0


TXN = ("TransactionalId", "txn", "Write")
TXN_CASES = [
    Case(
        "AddPartitionsToTxn",
        TXN,
        lambda n: m.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=n["txn"],
            v3_and_below_producer_id=4242,
            v3_and_below_producer_epoch=0,
            v3_and_below_topics=[
                m.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=n["topic"], partitions=[0])
            ],
        ),
        lambda r: past_authorization(
            r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
        ),
        TXN_DENIED,
        version=3,
        more=((("Topic", "topic", "Write"), TOPIC_DENIED),),
    ),
    Case(
        "AddPartitionsToTxn-v4-verify",
        ("Cluster", "cluster", "ClusterAction"),
        lambda n: m.AddPartitionsToTxnRequest(
            transactions=[
                m.AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
                    transactional_id=n["txn"],
                    producer_id=4242,
                    producer_epoch=0,
                    verify_only=True,
                    topics=[
                        m.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                            name=n["topic"], partitions=[0]
                        )
                    ],
                )
            ]
        ),
        lambda r: r.error_code,
        CLUSTER_DENIED,
        version=4,
    ),
    Case(
        "AddOffsetsToTxn",
        TXN,
        lambda n: m.AddOffsetsToTxnRequest(
            transactional_id=n["txn"], producer_id=4242, producer_epoch=0, group_id=n["group"]
        ),
        lambda r: past_authorization(r.error_code),
        TXN_DENIED,
        more=((("Group", "group", "Read"), GROUP_DENIED),),
    ),
    Case(
        "EndTxn",
        TXN,
        lambda n: m.EndTxnRequest(
            transactional_id=n["txn"], producer_id=4242, producer_epoch=0, committed=True
        ),
        lambda r: past_authorization(r.error_code),
        TXN_DENIED,
    ),
    Case(
        "TxnOffsetCommit",
        TXN,
        lambda n: m.TxnOffsetCommitRequest(
            transactional_id=n["txn"],
            group_id=n["group"],
            producer_id=4242,
            producer_epoch=0,
            topics=[
                m.TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
                    name=n["topic"],
                    partitions=[
                        m.TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                            partition_index=0, committed_offset=0
                        )
                    ],
                )
            ],
        ),
        lambda r: past_authorization(r.topics[0].partitions[0].error_code),
        TXN_DENIED,
        no_commit,
        more=(
            (("Group", "group", "Read"), GROUP_DENIED),
            (("Topic", "topic", "Read"), TOPIC_DENIED),
        ),
    ),
    Case(
        "WriteTxnMarkers",
        ("Cluster", "cluster", "ClusterAction"),
        lambda n: _marker(n["topic"]),
        lambda r: r.markers[0].topics[0].partitions[0].error_code,
        CLUSTER_DENIED,
        _no_marker,
    ),
    Case(
        "DescribeTransactions",
        ("TransactionalId", "txn", "Describe"),
        lambda n: m.DescribeTransactionsRequest(transactional_ids=[n["txn"]]),
        lambda r: past_authorization(r.transaction_states[0].error_code),
        TXN_DENIED,
    ),
    Case(
        "DescribeProducers",
        ("Topic", "topic", "Read"),
        lambda n: m.DescribeProducersRequest(
            topics=[m.DescribeProducersRequest.TopicRequest(name=n["topic"], partition_indexes=[0])]
        ),
        lambda r: r.topics[0].partitions[0].error_code,
        TOPIC_DENIED,
    ),
]


def _marker(topic: str, producer_id: int = 4242) -> m.WriteTxnMarkersRequest:
    return m.WriteTxnMarkersRequest(
        markers=[
            m.WriteTxnMarkersRequest.WritableTxnMarker(
                producer_id=producer_id,
                producer_epoch=0,
                transaction_result=True,
                coordinator_epoch=0,
                topics=[
                    m.WriteTxnMarkersRequest.WritableTxnMarkerTopic(
                        name=topic, partition_indexes=[0]
                    )
                ],
            )
        ]
    )


@pytest.mark.parametrize("case", TXN_CASES, ids=[c.api for c in TXN_CASES])
async def test_each_transaction_api_needs_its_acl(
    admin: Connection, alice: Connection, case: Case
) -> None:
    """The matrix's rows for the transaction APIs (test_authorization.py runs the rest)."""
    await run_case(admin, alice, case)


def test_every_api_the_broker_serves_has_a_rule_or_checks_in_its_handler() -> None:
    """So that a new API cannot be served unguarded: each registered API has a RULES entry
    or is in the documented HANDLER_CHECKED list, never both; `wrap` refuses any other."""
    dispatcher = Dispatcher()
    for request_cls, handler in HANDLERS:
        dispatcher.register(request_cls, handler)
    served = {cls.API_KEY: cls.__name__ for cls in dispatcher.request_classes()}
    guarded = set(RULES) | HANDLER_CHECKED
    unguarded = [name for key, name in served.items() if key not in guarded]
    assert unguarded == []
    assert not set(RULES) & HANDLER_CHECKED
    assert guarded <= set(served)  # no rule for an API not served
    unknown = max(served) + 1
    with pytest.raises(ValueError, match="no authorization rule"):
        authorization.wrap(unknown, lambda ctx: None, cast(Any, None), cast(Any, None))


async def test_a_forged_marker_from_a_principal_without_cluster_action_writes_nothing(
    admin: Connection, alice: Connection
) -> None:
    """alice tries to abort a transaction she does not own by writing its abort marker
    straight to the partition leader: refused, no control batch, until she holds Alter on
    the cluster (ClusterAction, the brokers' right, is the matrix's case)."""
    topic = f"forged-{uuid.uuid4().hex[:8]}"
    await create_topic(admin, topic)
    refused = await alice.send(_marker(topic))
    assert isinstance(refused, m.WriteTxnMarkersResponse)
    assert [
        (t.name, p.partition_index, p.error_code)
        for t in refused.markers[0].topics
        for p in t.partitions
    ] == [(topic, 0, CLUSTER_DENIED)]
    assert await end_offset(admin, topic) == 0
    # Describe on the cluster is not enough (Alter or ClusterAction is)
    await grant(admin, "Cluster", acl.CLUSTER_NAME, "Describe", principal(alice))
    still = await alice.send(_marker(topic))
    assert still.markers[0].topics[0].partitions[0].error_code == CLUSTER_DENIED  # type: ignore[attr-defined]
    assert await end_offset(admin, topic) == 0
    # Alter on the cluster is (Kafka checks it before ClusterAction: `transactions abort`)
    await grant(admin, "Cluster", acl.CLUSTER_NAME, "Alter", principal(alice))
    written = await alice.send(_marker(topic))
    assert written.markers[0].topics[0].partitions[0].error_code == 0  # type: ignore[attr-defined]
    assert await end_offset(admin, topic) == 1


async def test_transactions_are_listed_and_described_as_far_as_she_may_describe(
    admin: Connection, alice: Connection
) -> None:
    suffix = uuid.uuid4().hex[:8]
    txn, topic = f"seen-{suffix}", f"in-txn-{suffix}"
    await create_topic(admin, topic)
    started = await init_txn(admin, txn)
    assert await add_partition(admin, txn, started, topic) == [(topic, 0, 0)]

    def listed(response: m.ApiMessage) -> set[str]:
        assert isinstance(response, m.ListTransactionsResponse)
        return {t.transactional_id for t in response.transaction_states}

    assert txn in listed(await admin.send(m.ListTransactionsRequest()))
    assert txn not in listed(await alice.send(m.ListTransactionsRequest()))
    await grant(admin, "TransactionalId", txn, "Describe", principal(alice))
    assert txn in listed(await alice.send(m.ListTransactionsRequest()))
    described = await alice.send(m.DescribeTransactionsRequest(transactional_ids=[txn]))
    assert isinstance(described, m.DescribeTransactionsResponse)
    [state] = described.transaction_states
    assert (state.error_code, state.transaction_state, state.topics) == (0, "Ongoing", [])
    await grant(admin, "Topic", topic, "Describe", principal(alice))
    described = await alice.send(m.DescribeTransactionsRequest(transactional_ids=[txn]))
    assert [t.topic for t in described.transaction_states[0].topics] == [topic]  # type: ignore[attr-defined]


async def init_txn(conn: Connection, txn: str) -> m.InitProducerIdResponse:
    """A producer id and epoch for `txn` (the transaction state topic is made on demand,
    then loaded: asked again until it answers)."""
    deadline = time.monotonic() + 20
    while True:
        await conn.send(m.FindCoordinatorRequest(key_type=1, coordinator_keys=[txn]))
        started = await conn.send(
            m.InitProducerIdRequest(transactional_id=txn, transaction_timeout_ms=60_000)
        )
        assert isinstance(started, m.InitProducerIdResponse)
        if started.error_code == 0:
            return started
        assert time.monotonic() < deadline, started
        await asyncio.sleep(0.05)


async def add_partition(
    conn: Connection, txn: str, started: m.InitProducerIdResponse, *topics: str
) -> list[tuple[str, int, int]]:
    """AddPartitionsToTxn v3 for partition 0 of each topic: (topic, partition, error)."""
    added = await conn.send(
        m.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=txn,
            v3_and_below_producer_id=started.producer_id,
            v3_and_below_producer_epoch=started.producer_epoch,
            v3_and_below_topics=[
                m.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=[0])
                for t in topics
            ],
        ),
        3,
    )
    assert isinstance(added, m.AddPartitionsToTxnResponse)
    return [
        (t.name, p.partition_index, p.partition_error_code)
        for t in added.results_by_topic_v3_and_below
        for p in t.results_by_partition
    ]


async def test_a_denied_topic_adds_nothing_to_the_transaction(
    admin: Connection, alice: Connection
) -> None:
    """AddPartitionsToTxn from the transaction's own producer: one topic she may not write
    fails the whole request (the other OPERATION_NOT_ATTEMPTED) and the coordinator's state
    is unchanged; an internal topic is never hers to add, whatever her ACLs."""
    suffix = uuid.uuid4().hex[:8]
    txn, mine, theirs = f"add-{suffix}", f"mine-{suffix}", f"theirs-{suffix}"
    await create_topic(admin, mine)
    await create_topic(admin, theirs)
    await grant(admin, "TransactionalId", txn, "Write", principal(alice))
    await grant(admin, "Topic", mine, "Write", principal(alice))
    await grant(admin, "Topic", "__consumer_offsets", "Write", principal(alice))
    started = await init_txn(alice, txn)

    async def partitions() -> list[str]:
        described = await admin.send(m.DescribeTransactionsRequest(transactional_ids=[txn]))
        assert isinstance(described, m.DescribeTransactionsResponse)
        return [t.topic for t in described.transaction_states[0].topics]

    assert sorted(await add_partition(alice, txn, started, mine, theirs)) == [
        (mine, 0, 55),  # OPERATION_NOT_ATTEMPTED
        (theirs, 0, TOPIC_DENIED),
    ]
    assert await add_partition(alice, txn, started, "__consumer_offsets") == [
        ("__consumer_offsets", 0, TOPIC_DENIED)
    ]
    assert await partitions() == []
    await grant(admin, "Topic", theirs, "Write", principal(alice))
    assert sorted(await add_partition(alice, txn, started, mine, theirs)) == [
        (mine, 0, 0),
        (theirs, 0, 0),
    ]
    assert sorted(await partitions()) == [mine, theirs]


# --- real clients ----------------------------------------------------------------------


def _properties(tmp_path: Path, user: str) -> Path:
    path = tmp_path / f"{user}.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{user}" password="{user}-secret";\n'
    )
    return path


@pytest.fixture
def tool(authz: SecuredBroker, tmp_path: Path) -> Iterator[list[str]]:
    """`--bootstrap-server ... --command-config` as admin, for `riverlog acls`."""
    yield [
        "--bootstrap-server",
        authz.address("SASL_PLAINTEXT"),
        "--command-config",
        str(_properties(tmp_path, "admin")),
    ]


def _acls(tool: list[str], *args: str) -> None:
    assert main(["acls", *tool, "--add", "--allow-principal", "User:alice", *args]) == 0


def test_transactional_clients_need_kafkas_acls(
    authz: SecuredBroker, tool: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """confluent-kafka as `alice` (PLAIN): with only `--producer --transactional-id` ACLs
    the transaction starts but adding a topic is refused (AddPartitionsToTxn: TOPIC_
    AUTHORIZATION_FAILED) and nothing is written; with `--producer --topic` and `--consumer`
    ACLs it commits records and offsets; `riverlog transactions` works as alice."""
    suffix = uuid.uuid4().hex[:8]
    txn, topic, source, group = f"ck-{suffix}", f"out-{suffix}", f"in-{suffix}", f"g-{suffix}"
    _acls(tool, "--producer", "--transactional-id", txn)
    capsys.readouterr()
    conf = {
        "bootstrap.servers": authz.address("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
    }
    admin_conf = {**conf, "sasl.username": "admin", "sasl.password": "admin-secret"}
    for name in (topic, source):
        create = ["topics", *tool, "--create", "--topic", name, "--partitions", "1"]
        assert main([*create, "--replication-factor", "1"]) == 0
    seed = CKProducer({**admin_conf, "acks": "all"})
    seed.produce(source, b"in")
    seed.produce(topic, b"seed")
    assert seed.flush(30) == 0
    producer = CKProducer({**conf, "transactional.id": txn, "transaction.timeout.ms": 60_000})
    producer.init_transactions(30)
    producer.begin_transaction()
    failed: list[KafkaError] = []
    producer.produce(topic, b"refused", on_delivery=lambda err, _msg: failed.append(err))
    producer.flush(10)
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)
    assert [e.code() for e in failed] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    producer.abort_transaction(30)
    producer.flush(10)
    watcher = CKConsumer({**admin_conf, "group.id": f"w-{suffix}"})
    assert watcher.get_watermark_offsets(_tp(topic), 10) == (0, 1)  # the seed only

    _acls(tool, "--producer", "--topic", topic)
    _acls(tool, "--consumer", "--topic", source, "--group", group)
    capsys.readouterr()
    consumer = CKConsumer({**conf, "group.id": group, "enable.auto.commit": False})
    # a new producer (librdkafka keeps the topic's authorization error in its metadata)
    producer = CKProducer({**conf, "transactional.id": txn, "transaction.timeout.ms": 60_000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"committed", on_delivery=lambda err, _msg: err and failed.append(err))
    producer.send_offsets_to_transaction([_tp(source, 1)], consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(30)
    assert [e.code() for e in failed[1:]] == []
    # the seed, the committed record, its marker (the refused transaction left nothing);
    # the markers are written after EndTxn is answered, as in Kafka
    deadline = time.monotonic() + 20
    while (ends := watcher.get_watermark_offsets(_tp(topic), 10)) != (0, 3):
        assert time.monotonic() < deadline, ends
        time.sleep(0.05)
    committed = consumer.committed([_tp(source)], 30)
    assert committed[0].offset == 1
    consumer.close()
    watcher.close()

    alice = [
        "--bootstrap-server",
        authz.address("SASL_PLAINTEXT"),
        "--command-config",
        str(_properties(tmp_path, "alice")),
    ]
    assert main(["transactions", *alice, "describe", "--transactional-id", txn]) == 0
    out = capsys.readouterr().out
    assert txn in out and "CompleteCommit" in out
    assert main(["transactions", *alice, "list"]) == 0
    assert txn in capsys.readouterr().out


def _tp(topic: str, offset: int = -1001) -> object:
    from confluent_kafka import TopicPartition

    return TopicPartition(topic, 0, offset)


def test_kafka_python_transactions_need_kafkas_acls(
    authz: SecuredBroker, tool: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """kafka-python's transactional producer as `alice`: adding a topic she may not write
    and adding a group's offsets she may not read are refused (AddPartitionsToTxn,
    AddOffsetsToTxn) and nothing is written; with the ACLs, records and offsets commit."""
    from kafka import KafkaProducer
    from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTopicPartition

    suffix = uuid.uuid4().hex[:8]
    txn, topic, source, group = f"kp-{suffix}", f"kout-{suffix}", f"kin-{suffix}", f"kg-{suffix}"
    for name in (topic, source):
        create = ["topics", *tool, "--create", "--topic", name, "--partitions", "1"]
        assert main([*create, "--replication-factor", "1"]) == 0
    _acls(tool, "--producer", "--transactional-id", txn)
    capsys.readouterr()
    login = {
        "bootstrap_servers": authz.address("SASL_PLAINTEXT"),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "alice-secret",
    }
    producer = KafkaProducer(**login, transactional_id=txn)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        sent = producer.send(topic, b"refused")
        with pytest.raises(TopicAuthorizationFailedError):
            sent.get(timeout=30)
        producer.abort_transaction()

        _acls(tool, "--producer", "--topic", topic)
        capsys.readouterr()
        producer.begin_transaction()
        producer.send(topic, b"committed").get(timeout=30)
        offsets = {KTopicPartition(source, 0): OffsetAndMetadata(1, "", -1)}
        with pytest.raises(GroupAuthorizationFailedError):
            producer.send_offsets_to_transaction(offsets, group)
        producer.abort_transaction()

        _acls(tool, "--consumer", "--topic", source, "--group", group)
        capsys.readouterr()
        producer.begin_transaction()
        producer.send(topic, b"committed").get(timeout=30)
        producer.send_offsets_to_transaction(offsets, group)
        producer.commit_transaction()
    finally:
        producer.close()
    admin_conf = {
        "bootstrap.servers": authz.address("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "admin",
        "sasl.password": "admin-secret",
    }
    watcher = CKConsumer({**admin_conf, "group.id": group, "isolation.level": "read_committed"})
    try:
        deadline = time.monotonic() + 20
        while (committed := watcher.committed([_tp(source)], 10)[0].offset) != 1:
            assert time.monotonic() < deadline, committed
            time.sleep(0.05)
        watcher.assign([_tp(topic, 0)])
        got: list[bytes] = []
        while len(got) < 1 and time.monotonic() < deadline:
            msg = watcher.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        assert got == [b"committed"]  # the refused and the aborted transactions left nothing
        assert watcher.poll(1) is None
    finally:
        watcher.close()
