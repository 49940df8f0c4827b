"""Request handlers: one small module per family of APIs, and `HANDLERS`, the table the
dispatcher is built from (api key -> handler; ApiVersions is derived from it).

A handler maps a request to calls on the broker's components and their results to a
response; rules (leadership, acks, fencing, limits) live in those components.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from riverlog.protocol import messages as m
from riverlog.protocol.api import ApiMessage
from riverlog.server.handlers import (
    acls,
    admin,
    client_quotas,
    cluster,
    configs,
    elect_leaders,
    fetch,
    groups,
    log_dirs,
    metadata,
    offset_commits,
    offsets,
    produce,
    producers,
    reassignments,
    sasl,
    transactions,
)

HANDLERS: list[tuple[type[ApiMessage], Callable[..., Any]]] = [
    (m.ProduceRequest, produce.handle_produce),
    (m.FetchRequest, fetch.handle_fetch),
    (m.ListOffsetsRequest, offsets.handle_list_offsets),
    (m.MetadataRequest, metadata.handle_metadata),
    (m.OffsetForLeaderEpochRequest, offsets.handle_offset_for_leader_epoch),
    (m.DeleteRecordsRequest, offsets.handle_delete_records),
    (m.CreateTopicsRequest, admin.handle_create_topics),
    (m.DeleteTopicsRequest, admin.handle_delete_topics),
    (m.CreatePartitionsRequest, admin.handle_create_partitions),
    (m.DescribeLogDirsRequest, log_dirs.handle_describe_log_dirs),
    (m.AlterReplicaLogDirsRequest, log_dirs.handle_alter_replica_log_dirs),
    (m.DescribeConfigsRequest, configs.handle_describe_configs),
    (m.AlterConfigsRequest, configs.handle_alter_configs),
    (m.IncrementalAlterConfigsRequest, configs.handle_incremental_alter_configs),
    (m.DescribeClusterRequest, metadata.handle_describe_cluster),
    (m.InitProducerIdRequest, producers.handle_init_producer_id),
    (m.SaslHandshakeRequest, sasl.handle_sasl_handshake),
    (m.SaslAuthenticateRequest, sasl.handle_sasl_authenticate),
    (m.CreateAclsRequest, acls.handle_create_acls),
    (m.DescribeAclsRequest, acls.handle_describe_acls),
    (m.DeleteAclsRequest, acls.handle_delete_acls),
    (m.DescribeClientQuotasRequest, client_quotas.handle_describe_client_quotas),
    (m.AlterClientQuotasRequest, client_quotas.handle_alter_client_quotas),
    (m.DescribeUserScramCredentialsRequest, acls.handle_describe_user_scram_credentials),
    (m.AlterUserScramCredentialsRequest, acls.handle_alter_user_scram_credentials),
    (m.FindCoordinatorRequest, groups.handle_find_coordinator),
    (m.JoinGroupRequest, groups.handle_join_group),
    (m.SyncGroupRequest, groups.handle_sync_group),
    (m.HeartbeatRequest, groups.handle_heartbeat),
    (m.LeaveGroupRequest, groups.handle_leave_group),
    (m.ListGroupsRequest, groups.handle_list_groups),
    (m.DescribeGroupsRequest, groups.handle_describe_groups),
    (m.DeleteGroupsRequest, groups.handle_delete_groups),
    (m.OffsetCommitRequest, offset_commits.handle_offset_commit),
    (m.OffsetFetchRequest, offset_commits.handle_offset_fetch),
    (m.OffsetDeleteRequest, offset_commits.handle_offset_delete),
    (m.LeaderAndIsrRequest, cluster.handle_leader_and_isr),
    (m.UpdateMetadataRequest, cluster.handle_update_metadata),
    (m.StopReplicaRequest, cluster.handle_stop_replica),
    (m.ControlledShutdownRequest, cluster.handle_controlled_shutdown),
    (m.ElectLeadersRequest, elect_leaders.handle_elect_leaders),
    (m.AlterPartitionReassignmentsRequest, reassignments.handle_alter_partition_reassignments),
    (m.ListPartitionReassignmentsRequest, reassignments.handle_list_partition_reassignments),
    (m.AddPartitionsToTxnRequest, transactions.handle_add_partitions_to_txn),
    (m.AddOffsetsToTxnRequest, transactions.handle_add_offsets_to_txn),
    (m.EndTxnRequest, transactions.handle_end_txn),
    (m.TxnOffsetCommitRequest, transactions.handle_txn_offset_commit),
    (m.WriteTxnMarkersRequest, transactions.handle_write_txn_markers),
    (m.DescribeTransactionsRequest, transactions.handle_describe_transactions),
    (m.ListTransactionsRequest, transactions.handle_list_transactions),
    (m.DescribeProducersRequest, transactions.handle_describe_producers),
]
