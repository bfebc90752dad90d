"""The APIs dm serves and their version ranges: those of Apache Kafka 4.0 for every API dm implements
(tests/integration/test_versions.py compares them with 4.0's own ApiVersions), so clients that infer a
broker's release from its versions (kafka-python) see 4.0. Produce 13 and Fetch 18 are Kafka 4.1's.

Each entry declares what Kafka's KafkaApis authorizes for the API (protocol/access.py, ADR 0024); the
dispatcher enforces it and docs/security.md prints it (tests/unit/test_access.py checks both)."""

from __future__ import annotations

from ..security.acls import Operation as Op
from .access import PUBLIC, cluster, group, on_cluster, per_item, topic, transactional_id
from .dispatch import ApiSpec
from .handlers import (
    admin,
    cluster_admin,
    consumer_groups,
    fetch,
    groups,
    metadata,
    offsets,
    produce,
    quotas,
    sasl,
    security_admin,
    share,
    transactions,
)

SPECS: list[ApiSpec] = [
    ApiSpec(0, "Produce", 3, 12, produce.handle, per_item(
        transactional_id(Op.WRITE), topic(Op.WRITE)), advertised_min=0),
    ApiSpec(1, "Fetch", 4, 17, fetch.handle, per_item(
        on_cluster(Op.CLUSTER_ACTION), topic(Op.READ),
        note="CLUSTER_ACTION for a follower's fetch (replica_id >= 0), READ on each topic for a consumer's")),
    ApiSpec(2, "ListOffsets", 1, 10, offsets.handle_list_offsets, per_item(topic(Op.DESCRIBE))),
    ApiSpec(3, "Metadata", 0, 13, metadata.handle_metadata, per_item(
        topic(Op.DESCRIBE), topic(Op.CREATE, "an auto-created topic"), on_cluster(Op.CREATE),
        on_cluster(Op.DESCRIBE), filtered=True,
        note="topics it may not describe are left out of an all-topics answer; auto-creation needs CREATE on "
             "the cluster or the topic; DESCRIBE on the cluster for its authorized operations")),
    ApiSpec(18, "ApiVersions", 0, 4, metadata.handle_api_versions, PUBLIC),
    ApiSpec(19, "CreateTopics", 2, 7, admin.handle_create_topics, per_item(
        on_cluster(Op.CREATE), topic(Op.CREATE), topic(Op.DESCRIBE_CONFIGS, "each created topic's configs"),
        note="CREATE on the cluster or on each topic")),
    ApiSpec(20, "DeleteTopics", 1, 6, admin.handle_delete_topics, per_item(
        topic(Op.DELETE), topic(Op.DESCRIBE, "a topic named by id"))),
    ApiSpec(21, "DeleteRecords", 0, 2, cluster_admin.handle_delete_records, per_item(topic(Op.DELETE))),
    ApiSpec(22, "InitProducerId", 0, 5, admin.handle_init_producer_id, per_item(
        transactional_id(Op.WRITE), on_cluster(Op.IDEMPOTENT_WRITE), topic(Op.WRITE, "any topic"),
        note="transactional: WRITE on the id; idempotent: IDEMPOTENT_WRITE on the cluster or WRITE on any topic")),
    ApiSpec(23, "OffsetForLeaderEpoch", 2, 4, offsets.handle_offset_for_leader_epoch, per_item(
        on_cluster(Op.CLUSTER_ACTION), topic(Op.DESCRIBE),
        note="CLUSTER_ACTION for a follower (replica_id >= 0), DESCRIBE on each topic for a client")),
    ApiSpec(32, "DescribeConfigs", 1, 4, admin.handle_describe_configs, per_item(
        topic(Op.DESCRIBE_CONFIGS), on_cluster(Op.DESCRIBE_CONFIGS), group(Op.DESCRIBE_CONFIGS, "each group resource"),
        note="the cluster for broker resources")),
    ApiSpec(33, "AlterConfigs", 0, 2, admin.handle_alter_configs, per_item(
        topic(Op.ALTER_CONFIGS), on_cluster(Op.ALTER_CONFIGS), note="the cluster for broker resources")),
    ApiSpec(34, "AlterReplicaLogDirs", 1, 2, cluster_admin.handle_alter_replica_log_dirs,
            cluster(Op.ALTER, cluster_admin.refuse_alter_replica_log_dirs)),
    ApiSpec(35, "DescribeLogDirs", 1, 4, cluster_admin.handle_describe_log_dirs, cluster(Op.DESCRIBE)),
    ApiSpec(37, "CreatePartitions", 0, 3, admin.handle_create_partitions, per_item(topic(Op.ALTER))),
    ApiSpec(43, "ElectLeaders", 0, 2, cluster_admin.handle_elect_leaders,
            cluster(Op.ALTER, cluster_admin.refuse_elect_leaders)),
    ApiSpec(44, "IncrementalAlterConfigs", 0, 1, admin.handle_incremental_alter_configs, per_item(
        topic(Op.ALTER_CONFIGS), on_cluster(Op.ALTER_CONFIGS), group(Op.ALTER_CONFIGS, "each group resource"),
        note="the cluster for broker resources")),
    ApiSpec(45, "AlterPartitionReassignments", 0, 1, cluster_admin.handle_alter_partition_reassignments,
            cluster(Op.ALTER)),
    ApiSpec(46, "ListPartitionReassignments", 0, 0, cluster_admin.handle_list_partition_reassignments,
            cluster(Op.DESCRIBE)),
    ApiSpec(75, "DescribeTopicPartitions", 0, 0, metadata.handle_describe_topic_partitions, per_item(
        topic(Op.DESCRIBE), filtered=True,
        note="topics it may not describe are left out of an all-topics answer, TOPIC_AUTHORIZATION_FAILED when "
             "named")),
    ApiSpec(60, "DescribeCluster", 0, 2, metadata.handle_describe_cluster, per_item(
        on_cluster(Op.DESCRIBE), filtered=True, note="only for the cluster's authorized operations (0 without it)")),
    ApiSpec(8, "OffsetCommit", 2, 9, groups.handle_offset_commit, per_item(group(Op.READ), topic(Op.READ))),
    ApiSpec(9, "OffsetFetch", 1, 9, groups.handle_offset_fetch, per_item(
        group(Op.DESCRIBE), topic(Op.DESCRIBE), filtered=True,
        note="offsets of topics it may not describe are left out of an all-offsets answer")),
    ApiSpec(10, "FindCoordinator", 0, 6, groups.handle_find_coordinator, per_item(
        group(Op.DESCRIBE, "each group key"), transactional_id(Op.DESCRIBE, "each transactional key"),
        note="nothing (internal topics included) is created for a key that is not authorized")),
    ApiSpec(11, "JoinGroup", 0, 9, groups.handle_join_group, per_item(group(Op.READ))),
    ApiSpec(12, "Heartbeat", 0, 4, groups.handle_heartbeat, per_item(group(Op.READ))),
    ApiSpec(13, "LeaveGroup", 0, 5, groups.handle_leave_group, per_item(group(Op.READ))),
    ApiSpec(14, "SyncGroup", 0, 5, groups.handle_sync_group, per_item(group(Op.READ))),
    ApiSpec(15, "DescribeGroups", 0, 6, groups.handle_describe_groups, per_item(group(Op.DESCRIBE, "each group"))),
    ApiSpec(16, "ListGroups", 0, 5, groups.handle_list_groups, per_item(
        on_cluster(Op.DESCRIBE), group(Op.DESCRIBE, "each group"), filtered=True,
        note="DESCRIBE on the cluster lists every group, else those it may describe")),
    ApiSpec(42, "DeleteGroups", 0, 2, groups.handle_delete_groups, per_item(group(Op.DELETE, "each group"))),
    ApiSpec(47, "OffsetDelete", 0, 0, groups.handle_offset_delete, per_item(group(Op.DELETE), topic(Op.READ))),
    ApiSpec(68, "ConsumerGroupHeartbeat", 0, 1, consumer_groups.handle_consumer_group_heartbeat, per_item(
        group(Op.READ), topic(Op.DESCRIBE, "each subscribed topic name"))),
    ApiSpec(69, "ConsumerGroupDescribe", 0, 1, consumer_groups.handle_consumer_group_describe, per_item(
        group(Op.DESCRIBE, "each group"), topic(Op.DESCRIBE, "each topic its members subscribe to or own"),
        note="a group using topics the principal may not describe is TOPIC_AUTHORIZATION_FAILED")),
    ApiSpec(76, "ShareGroupHeartbeat", 1, 1, share.handle_share_group_heartbeat, per_item(
        group(Op.READ), topic(Op.DESCRIBE, "each subscribed topic name"))),
    ApiSpec(77, "ShareGroupDescribe", 1, 1, share.handle_share_group_describe, per_item(
        group(Op.DESCRIBE, "each group"), topic(Op.DESCRIBE, "each topic its members subscribe to"),
        note="a group using topics the principal may not describe is TOPIC_AUTHORIZATION_FAILED")),
    ApiSpec(78, "ShareFetch", 1, 2, share.handle_share_fetch, per_item(group(Op.READ), topic(Op.READ))),
    ApiSpec(79, "ShareAcknowledge", 1, 2, share.handle_share_acknowledge, per_item(group(Op.READ), topic(Op.READ))),
    ApiSpec(84, "ReadShareGroupState", 0, 0, share.handle_read_share_group_state,
            cluster(Op.CLUSTER_ACTION, share.refuse_read_share_group_state)),
    ApiSpec(85, "WriteShareGroupState", 0, 0, share.handle_write_share_group_state,
            cluster(Op.CLUSTER_ACTION, share.refuse_write_share_group_state)),
    ApiSpec(86, "DeleteShareGroupState", 0, 0, share.handle_delete_share_group_state,
            cluster(Op.CLUSTER_ACTION, share.refuse_delete_share_group_state)),
    ApiSpec(90, "DescribeShareGroupOffsets", 0, 1, share.handle_describe_share_group_offsets, per_item(
        group(Op.DESCRIBE, "each group"), topic(Op.DESCRIBE), filtered=True,
        note="topics it may not describe are left out of an all-topics answer")),
    ApiSpec(91, "AlterShareGroupOffsets", 0, 0, share.handle_alter_share_group_offsets, per_item(
        group(Op.READ), topic(Op.READ))),
    ApiSpec(92, "DeleteShareGroupOffsets", 0, 0, share.handle_delete_share_group_offsets, per_item(
        group(Op.DELETE), topic(Op.READ))),
    ApiSpec(24, "AddPartitionsToTxn", 0, 5, transactions.handle_add_partitions_to_txn, per_item(
        transactional_id(Op.WRITE), topic(Op.WRITE), on_cluster(Op.CLUSTER_ACTION),
        note="v0-3 (clients): WRITE on the id and each topic; v4+ (brokers verifying): CLUSTER_ACTION")),
    ApiSpec(25, "AddOffsetsToTxn", 0, 4, transactions.handle_add_offsets_to_txn, per_item(
        transactional_id(Op.WRITE), group(Op.READ))),
    ApiSpec(26, "EndTxn", 0, 5, transactions.handle_end_txn, per_item(transactional_id(Op.WRITE))),
    ApiSpec(27, "WriteTxnMarkers", 1, 1, transactions.handle_write_txn_markers, per_item(
        on_cluster(Op.ALTER), on_cluster(Op.CLUSTER_ACTION), note="ALTER or CLUSTER_ACTION on the cluster")),
    ApiSpec(28, "TxnOffsetCommit", 0, 5, transactions.handle_txn_offset_commit, per_item(
        transactional_id(Op.WRITE), group(Op.READ), topic(Op.READ))),
    ApiSpec(61, "DescribeProducers", 0, 0, transactions.handle_describe_producers, per_item(topic(Op.READ))),
    ApiSpec(65, "DescribeTransactions", 0, 0, transactions.handle_describe_transactions, per_item(
        transactional_id(Op.DESCRIBE, "each transactional id"), topic(Op.DESCRIBE), filtered=True,
        note="partitions of topics it may not describe are left out")),
    ApiSpec(66, "ListTransactions", 0, 1, transactions.handle_list_transactions, per_item(
        transactional_id(Op.DESCRIBE, "each transaction"), filtered=True)),
    ApiSpec(17, "SaslHandshake", 0, 1, sasl.handle_sasl_handshake, PUBLIC),
    ApiSpec(36, "SaslAuthenticate", 0, 2, sasl.handle_sasl_authenticate, PUBLIC),
    ApiSpec(29, "DescribeAcls", 1, 3, security_admin.handle_describe_acls, cluster(Op.DESCRIBE)),
    ApiSpec(30, "CreateAcls", 1, 3, security_admin.handle_create_acls,
            cluster(Op.ALTER, security_admin.refuse_create_acls)),
    ApiSpec(31, "DeleteAcls", 1, 3, security_admin.handle_delete_acls,
            cluster(Op.ALTER, security_admin.refuse_delete_acls)),
    ApiSpec(50, "DescribeUserScramCredentials", 0, 0, security_admin.handle_describe_user_scram_credentials,
            cluster(Op.DESCRIBE)),
    ApiSpec(51, "AlterUserScramCredentials", 0, 0, security_admin.handle_alter_user_scram_credentials,
            cluster(Op.ALTER, security_admin.refuse_alter_user_scram_credentials)),
    ApiSpec(48, "DescribeClientQuotas", 0, 1, quotas.handle_describe_client_quotas, cluster(Op.DESCRIBE_CONFIGS)),
    ApiSpec(49, "AlterClientQuotas", 0, 1, quotas.handle_alter_client_quotas,
            cluster(Op.ALTER_CONFIGS, quotas.refuse_alter_client_quotas)),
]
