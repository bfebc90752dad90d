"""The APIs dm serves and their version ranges: those of Apache Kafka 4.0 for every API dm implements
(tests/integration/test_versions.py compares them with 4.0's own ApiVersions), so clients that infer a
broker's release from its versions (kafka-python) see 4.0. Produce 13 and Fetch 18 are Kafka 4.1's."""

from __future__ import annotations

from .dispatch import ApiSpec
from .handlers import admin, cluster_admin, fetch, groups, metadata, offsets, produce, sasl, transactions

SPECS: list[ApiSpec] = [
    ApiSpec(0, "Produce", 3, 12, produce.handle, advertised_min=0),
    ApiSpec(1, "Fetch", 4, 17, fetch.handle),
    ApiSpec(2, "ListOffsets", 1, 10, offsets.handle_list_offsets),
    ApiSpec(3, "Metadata", 0, 13, metadata.handle_metadata),
    ApiSpec(18, "ApiVersions", 0, 4, metadata.handle_api_versions),
    ApiSpec(19, "CreateTopics", 2, 7, admin.handle_create_topics),
    ApiSpec(20, "DeleteTopics", 1, 6, admin.handle_delete_topics),
    ApiSpec(21, "DeleteRecords", 0, 2, cluster_admin.handle_delete_records),
    ApiSpec(22, "InitProducerId", 0, 5, admin.handle_init_producer_id),
    ApiSpec(23, "OffsetForLeaderEpoch", 2, 4, offsets.handle_offset_for_leader_epoch),
    ApiSpec(32, "DescribeConfigs", 1, 4, admin.handle_describe_configs),
    ApiSpec(33, "AlterConfigs", 0, 2, admin.handle_alter_configs),
    ApiSpec(34, "AlterReplicaLogDirs", 1, 2, cluster_admin.handle_alter_replica_log_dirs),
    ApiSpec(35, "DescribeLogDirs", 1, 4, cluster_admin.handle_describe_log_dirs),
    ApiSpec(37, "CreatePartitions", 0, 3, admin.handle_create_partitions),
    ApiSpec(43, "ElectLeaders", 0, 2, cluster_admin.handle_elect_leaders),
    ApiSpec(44, "IncrementalAlterConfigs", 0, 1, admin.handle_incremental_alter_configs),
    ApiSpec(45, "AlterPartitionReassignments", 0, 1, cluster_admin.handle_alter_partition_reassignments),
    ApiSpec(46, "ListPartitionReassignments", 0, 0, cluster_admin.handle_list_partition_reassignments),
    ApiSpec(60, "DescribeCluster", 0, 2, metadata.handle_describe_cluster),
    ApiSpec(8, "OffsetCommit", 2, 9, groups.handle_offset_commit),
    ApiSpec(9, "OffsetFetch", 1, 9, groups.handle_offset_fetch),
    ApiSpec(10, "FindCoordinator", 0, 6, groups.handle_find_coordinator),
    ApiSpec(11, "JoinGroup", 0, 9, groups.handle_join_group),
    ApiSpec(12, "Heartbeat", 0, 4, groups.handle_heartbeat),
    ApiSpec(13, "LeaveGroup", 0, 5, groups.handle_leave_group),
    ApiSpec(14, "SyncGroup", 0, 5, groups.handle_sync_group),
    ApiSpec(15, "DescribeGroups", 0, 6, groups.handle_describe_groups),
    ApiSpec(16, "ListGroups", 0, 5, groups.handle_list_groups),
    ApiSpec(42, "DeleteGroups", 0, 2, groups.handle_delete_groups),
    ApiSpec(47, "OffsetDelete", 0, 0, groups.handle_offset_delete),
    ApiSpec(24, "AddPartitionsToTxn", 0, 5, transactions.handle_add_partitions_to_txn),
    ApiSpec(25, "AddOffsetsToTxn", 0, 4, transactions.handle_add_offsets_to_txn),
    ApiSpec(26, "EndTxn", 0, 5, transactions.handle_end_txn),
    ApiSpec(27, "WriteTxnMarkers", 1, 1, transactions.handle_write_txn_markers),
    ApiSpec(28, "TxnOffsetCommit", 0, 5, transactions.handle_txn_offset_commit),
    ApiSpec(61, "DescribeProducers", 0, 0, transactions.handle_describe_producers),
    ApiSpec(65, "DescribeTransactions", 0, 0, transactions.handle_describe_transactions),
    ApiSpec(66, "ListTransactions", 0, 1, transactions.handle_list_transactions),
    ApiSpec(17, "SaslHandshake", 0, 1, sasl.handle_sasl_handshake),
    ApiSpec(36, "SaslAuthenticate", 0, 2, sasl.handle_sasl_authenticate),
]
