"""What Apache Kafka 4.0's KafkaApis asks the authorizer for each API, written down from Kafka (not from
dm's table), with a request that names the resources. The conformance tests (tests/unit/test_access.py,
tests/integration/test_authorization_conformance.py) check dm's declarations and behaviour against it;
an API dm serves without an entry here fails them."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dm_broker.log.records import build_batch
from dm_broker.protocol.access import empty
from dm_broker.protocol.build import nested
from dm_broker.protocol.codec import request_class

TOPIC = "conf-t"
GROUP = "conf-g"
TXN = "conf-tx"
NEW_TOPIC = "conf-new"
DELETED_TOPIC = "conf-del"
MARKER_TOPIC = "conf-markers"
CLUSTER = "kafka-cluster"
SECONDS = datetime.timedelta(seconds=5)

# (resource type, name, operation) as confluent-kafka's AclBinding names them
Acl = tuple[str, str, str]


@dataclass(frozen=True)
class Rule:
    """`acls`: exactly what Kafka requires for `request` to pass authorization. `declared`: every
    (resource type, operation) Kafka may ask for the API (a superset where the request chooses).
    `filtered`: denied, the request is answered with what is visible instead of an error; the
    predicate says the answer shows nothing it should hide."""

    version: int
    request: Callable[[], Any]
    acls: tuple[Acl, ...]
    declared: frozenset[tuple[str, str]]
    public: bool = False
    hides: Callable[[Any], bool] | None = None


def req(key: int, version: int, **values: Any) -> Any:
    return empty(request_class(key, version), **values)


def sub(key: int, version: int, entity: str, **values: Any) -> Any:
    return empty(nested(request_class(key, version), entity), **values)


def _batch() -> bytes:
    return build_batch([(None, b"conformance", [])], timestamp_ms=int(time.time() * 1000))


def produce() -> Any:
    return req(0, 9, acks=1, timeout=SECONDS, topic_data=(sub(0, 9, "TopicProduceData", name=TOPIC, partition_data=(
        sub(0, 9, "PartitionProduceData", index=0, records=_batch()),)),))


def fetch() -> Any:
    return req(1, 12, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=1 << 20,
               session_epoch=-1, topics=(sub(1, 12, "FetchTopic", topic=TOPIC, partitions=(
                   sub(1, 12, "FetchPartition", partition=0, fetch_offset=0, partition_max_bytes=1 << 20,
                       current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1),)),))


def list_offsets() -> Any:
    return req(2, 7, replica_id=-1, topics=(sub(2, 7, "ListOffsetsTopic", name=TOPIC, partitions=(
        sub(2, 7, "ListOffsetsPartition", partition_index=0, current_leader_epoch=-1, timestamp=-1),)),))


def metadata_of_topic(topic: str = TOPIC) -> Any:
    return req(3, 12, topics=(sub(3, 12, "MetadataRequestTopic", topic_id=uuid.UUID(int=0), name=topic),),
               allow_auto_topic_creation=False)


def metadata_all() -> Any:
    return req(3, 12, topics=None, allow_auto_topic_creation=False)


def describe_topic_partitions() -> Any:
    return req(75, 0, topics=(sub(75, 0, "TopicRequest", name=TOPIC),), response_partition_limit=2000)


def describe_all_topic_partitions() -> Any:
    return req(75, 0, topics=(), response_partition_limit=2000)


def create_topics() -> Any:
    return req(19, 7, timeout=SECONDS, validate_only=True, topics=(
        sub(19, 7, "CreatableTopic", name=NEW_TOPIC, num_partitions=1, replication_factor=1),))


def delete_topics() -> Any:
    return req(20, 6, timeout=SECONDS, topics=(sub(20, 6, "DeleteTopicState", name=DELETED_TOPIC,
                                                   topic_id=uuid.UUID(int=0)),))


def delete_records() -> Any:
    return req(21, 2, timeout=SECONDS, topics=(sub(21, 2, "DeleteRecordsTopic", name=TOPIC, partitions=(
        sub(21, 2, "DeleteRecordsPartition", partition_index=0, offset=0),)),))


def init_producer_id_transactional() -> Any:
    return req(22, 4, transactional_id=TXN, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
               producer_epoch=-1)


def init_producer_id_idempotent() -> Any:
    return req(22, 4, transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
               producer_epoch=-1)


def offset_for_leader_epoch() -> Any:
    return req(23, 4, replica_id=-1, topics=(sub(23, 4, "OffsetForLeaderTopic", topic=TOPIC, partitions=(
        sub(23, 4, "OffsetForLeaderPartition", partition=0, current_leader_epoch=-1, leader_epoch=0),)),))


def describe_configs() -> Any:
    return req(32, 4, resources=(sub(32, 4, "DescribeConfigsResource", resource_type=2, resource_name=TOPIC,
                                     configuration_keys=None),))


def alter_configs() -> Any:
    return req(33, 2, validate_only=True, resources=(sub(33, 2, "AlterConfigsResource", resource_type=2,
                                                         resource_name=TOPIC, configs=(
        sub(33, 2, "AlterableConfig", name="retention.ms", value="3600000"),)),))


def alter_replica_log_dirs() -> Any:
    return req(34, 2, dirs=(sub(34, 2, "AlterReplicaLogDir", path="/nonexistent", topics=(
        sub(34, 2, "AlterReplicaLogDirTopic", name=TOPIC, partitions=(0,)),)),))


def describe_log_dirs() -> Any:
    return req(35, 4, topics=None)


def create_partitions() -> Any:
    return req(37, 3, timeout=SECONDS, validate_only=True, topics=(
        sub(37, 3, "CreatePartitionsTopic", name=TOPIC, count=2, assignments=None),))


def elect_leaders() -> Any:
    return req(43, 2, election_type=0, timeout=SECONDS, topic_partitions=(
        sub(43, 2, "TopicPartitions", topic=TOPIC, partitions=(0,)),))


def incremental_alter_configs() -> Any:
    return req(44, 1, validate_only=True, resources=(sub(44, 1, "AlterConfigsResource", resource_type=2,
                                                         resource_name=TOPIC, configs=(
        sub(44, 1, "AlterableConfig", name="retention.ms", config_operation=0, value="3600000"),)),))


def alter_partition_reassignments() -> Any:
    return req(45, 0, timeout=SECONDS, topics=(sub(45, 0, "ReassignableTopic", name=TOPIC, partitions=(
        sub(45, 0, "ReassignablePartition", partition_index=0, replicas=None),)),))


def list_partition_reassignments() -> Any:
    return req(46, 0, timeout=SECONDS, topics=None)


def describe_cluster() -> Any:
    return req(60, 1, include_cluster_authorized_operations=True, endpoint_type=1)


def offset_commit() -> Any:
    return req(8, 8, group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
               topics=(sub(8, 8, "OffsetCommitRequestTopic", name=TOPIC, partitions=(
                   sub(8, 8, "OffsetCommitRequestPartition", partition_index=0, committed_offset=0,
                       committed_leader_epoch=-1, committed_metadata=""),)),))


def offset_fetch() -> Any:
    return req(9, 8, groups=(sub(9, 8, "OffsetFetchRequestGroup", group_id=GROUP, topics=(
        sub(9, 8, "OffsetFetchRequestTopics", name=TOPIC, partition_indexes=(0,)),)),))


def find_coordinator() -> Any:
    return req(10, 4, key_type=0, coordinator_keys=(GROUP,))


def join_group() -> Any:
    return req(11, 7, group_id=GROUP, session_timeout=datetime.timedelta(seconds=10),
               rebalance_timeout=datetime.timedelta(seconds=10), member_id="", group_instance_id=None,
               protocol_type="consumer", protocols=(sub(11, 7, "JoinGroupRequestProtocol", name="range",
                                                        metadata=b""),))


def heartbeat() -> Any:
    return req(12, 4, group_id=GROUP, generation_id=0, member_id="m", group_instance_id=None)


def leave_group() -> Any:
    return req(13, 4, group_id=GROUP, members=(sub(13, 4, "MemberIdentity", member_id="m",
                                                   group_instance_id=None),))


def sync_group() -> Any:
    return req(14, 5, group_id=GROUP, generation_id=0, member_id="m", group_instance_id=None,
               protocol_type="consumer", protocol_name="range", assignments=())


KIP848_GROUP = "conf-g848"  # its own group: a KIP-848 member would keep classic JoinGroups out of GROUP


def consumer_group_heartbeat() -> Any:
    return req(68, 1, group_id=KIP848_GROUP, member_id="conf-member", member_epoch=0,
               rebalance_timeout=datetime.timedelta(seconds=10), subscribed_topic_names=(TOPIC,),
               topic_partitions=())


def consumer_group_describe() -> Any:
    return req(69, 1, group_ids=(KIP848_GROUP,), include_authorized_operations=False)


SHARE_GROUP = "conf-share"


def share_group_heartbeat() -> Any:
    return req(76, 1, group_id=SHARE_GROUP, member_id="conf-share-member", member_epoch=0, rack_id=None,
               subscribed_topic_names=(TOPIC,))


def share_group_describe() -> Any:
    return req(77, 1, group_ids=(SHARE_GROUP,), include_authorized_operations=False)


def share_fetch() -> Any:
    part = sub(78, 1, "FetchPartition", partition_index=0, acknowledgement_batches=())
    return req(78, 1, group_id=SHARE_GROUP, member_id="conf-share-member", share_session_epoch=0,
               max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20, max_records=10, batch_size=10,
               topics=(sub(78, 1, "FetchTopic", topic_id=uuid.uuid4(), partitions=(part,)),), forgotten_topics_data=())


def share_acknowledge() -> Any:
    return req(79, 1, group_id=SHARE_GROUP, member_id="conf-share-member", share_session_epoch=1, topics=())


def read_share_group_state() -> Any:
    part = sub(84, 0, "PartitionData", partition=0, leader_epoch=-1)
    return req(84, 0, group_id=SHARE_GROUP, topics=(sub(84, 0, "ReadStateData", topic_id=uuid.uuid4(),
                                                        partitions=(part,)),))


def write_share_group_state() -> Any:
    part = sub(85, 0, "PartitionData", partition=0, state_epoch=0, leader_epoch=0, start_offset=0, state_batches=())
    return req(85, 0, group_id=SHARE_GROUP, topics=(sub(85, 0, "WriteStateData", topic_id=uuid.uuid4(),
                                                         partitions=(part,)),))


def delete_share_group_state() -> Any:
    part = sub(86, 0, "PartitionData", partition=0)
    return req(86, 0, group_id=SHARE_GROUP, topics=(sub(86, 0, "DeleteStateData", topic_id=uuid.uuid4(),
                                                         partitions=(part,)),))


def describe_share_group_offsets() -> Any:
    topic = sub(90, 1, "DescribeShareGroupOffsetsRequestTopic", topic_name=TOPIC, partitions=(0,))
    return req(90, 1, groups=(sub(90, 1, "DescribeShareGroupOffsetsRequestGroup", group_id=SHARE_GROUP,
                                  topics=(topic,)),))


def alter_share_group_offsets() -> Any:
    part = sub(91, 0, "AlterShareGroupOffsetsRequestPartition", partition_index=0, start_offset=0)
    return req(91, 0, group_id=SHARE_GROUP, topics=(sub(91, 0, "AlterShareGroupOffsetsRequestTopic", topic_name=TOPIC,
                                                         partitions=(part,)),))


def delete_share_group_offsets() -> Any:
    return req(92, 0, group_id=SHARE_GROUP, topics=(sub(92, 0, "DeleteShareGroupOffsetsRequestTopic",
                                                         topic_name=TOPIC),))


def describe_groups() -> Any:
    return req(15, 5, groups=(GROUP,), include_authorized_operations=False)


def list_groups() -> Any:
    return req(16, 4, states_filter=())


def delete_groups() -> Any:
    return req(42, 2, groups_names=("conf-gone",))


def offset_delete() -> Any:
    return req(47, 0, group_id=GROUP, topics=(sub(47, 0, "OffsetDeleteRequestTopic", name=TOPIC, partitions=(
        sub(47, 0, "OffsetDeleteRequestPartition", partition_index=0),)),))


def add_partitions_to_txn() -> Any:
    return req(24, 3, v3_and_below_transactional_id=TXN, v3_and_below_producer_id=0, v3_and_below_producer_epoch=0,
               v3_and_below_topics=(sub(24, 3, "AddPartitionsToTxnTopic", name=TOPIC, partitions=(0,)),))


def add_offsets_to_txn() -> Any:
    return req(25, 3, transactional_id=TXN, producer_id=0, producer_epoch=0, group_id=GROUP)


def end_txn() -> Any:
    return req(26, 3, transactional_id=TXN, producer_id=0, producer_epoch=0, committed=False)


def write_txn_markers() -> Any:
    return req(27, 1, markers=(sub(27, 1, "WritableTxnMarker", producer_id=987654, producer_epoch=0,
                                   transaction_result=False, coordinator_epoch=0, topics=(
        sub(27, 1, "WritableTxnMarkerTopic", name=MARKER_TOPIC, partition_indexes=(0,)),)),))


def txn_offset_commit() -> Any:
    return req(28, 3, transactional_id=TXN, group_id=GROUP, producer_id=0, producer_epoch=0, generation_id=-1,
               member_id="", group_instance_id=None, topics=(sub(28, 3, "TxnOffsetCommitRequestTopic", name=TOPIC,
                                                                 partitions=(
        sub(28, 3, "TxnOffsetCommitRequestPartition", partition_index=0, committed_offset=0,
            committed_leader_epoch=-1, committed_metadata=""),)),))


def describe_producers() -> Any:
    return req(61, 0, topics=(sub(61, 0, "TopicRequest", name=TOPIC, partition_indexes=(0,)),))


def describe_transactions() -> Any:
    return req(65, 0, transactional_ids=(TXN,))


def list_transactions() -> Any:
    return req(66, 1, state_filters=(), producer_id_filters=(), duration_filter=-1)


def sasl_handshake() -> Any:
    return req(17, 1, mechanism="PLAIN")


def api_versions() -> Any:
    return req(18, 3, client_software_name="conformance", client_software_version="1")


def sasl_authenticate() -> Any:
    return req(36, 2, auth_bytes=b"")


def describe_acls() -> Any:
    return req(29, 3, resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
               principal_filter=None, host_filter=None, operation=1, permission_type=1)


def create_acls() -> Any:
    return req(30, 3, creations=(sub(30, 3, "AclCreation", resource_type=2, resource_name="conf-zzz",
                                     resource_pattern_type=3, principal="User:nobody-else", host="*",
                                     operation=3, permission_type=3),))


def delete_acls() -> Any:
    return req(31, 3, filters=(sub(31, 3, "DeleteAclsFilter", resource_type_filter=2,
                                   resource_name_filter="conf-zzz", pattern_type_filter=3,
                                   principal_filter="User:nobody-else", host_filter="*", operation=3,
                                   permission_type=3),))


def describe_user_scram_credentials() -> Any:
    return req(50, 0, users=None)


def describe_client_quotas() -> Any:
    return req(48, 1, components=(), strict=False)


def alter_client_quotas() -> Any:
    cls = request_class(49, 1)
    entity = empty(nested(cls, "EntityData"), entity_type="user", entity_name="conf-nobody")
    op = empty(nested(cls, "OpData"), key="producer_byte_rate", value=0.0, remove=True)
    return req(49, 1, entries=(empty(nested(cls, "EntryData"), entity=(entity,), ops=(op,)),), validate_only=False)


def alter_user_scram_credentials() -> Any:
    return req(51, 0, deletions=(sub(51, 0, "ScramCredentialDeletion", name="conf-nobody", mechanism=1),),
               upsertions=())


# CreateTopics hides a created topic's configs from who may not describe them: not a refusal.
NOT_REFUSALS = frozenset({"topic_config_error_code"})


def error_codes(value: Any) -> set[int]:
    """Every error code anywhere in a kio entity (fields named *error_code, but NOT_REFUSALS)."""
    found: set[int] = set()
    if isinstance(value, tuple):
        for item in value:
            found |= error_codes(item)
    elif hasattr(value, "__dataclass_fields__"):
        for name in value.__dataclass_fields__:
            inner = getattr(value, name)
            if name.endswith("error_code") and name not in NOT_REFUSALS:
                found.add(int(inner))
            found |= error_codes(inner)
    return found


AUTHORIZATION_FAILED = {29, 30, 31, 53}  # TOPIC_, GROUP_, CLUSTER_, TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def _hides_topics(resp: Any) -> bool:
    return TOPIC not in {t.name for t in resp.topics}


def _hides_groups(resp: Any) -> bool:
    return GROUP not in {g.group_id for g in resp.groups}


def _hides_transactions(resp: Any) -> bool:
    return TXN not in {t.transactional_id for t in resp.transaction_states}


def _hides_cluster_operations(resp: Any) -> bool:
    return resp.cluster_authorized_operations == 0


T, G, X, C = "TOPIC", "GROUP", "TRANSACTIONAL_ID", "BROKER"  # confluent-kafka calls the cluster BROKER


def _d(*pairs: tuple[str, str]) -> frozenset[tuple[str, str]]:
    return frozenset(pairs)


RULES: dict[int, Rule] = {
    0: Rule(9, produce, ((T, TOPIC, "WRITE"),), _d((X, "WRITE"), (T, "WRITE"))),
    1: Rule(12, fetch, ((T, TOPIC, "READ"),), _d((C, "CLUSTER_ACTION"), (T, "READ"))),
    2: Rule(7, list_offsets, ((T, TOPIC, "DESCRIBE"),), _d((T, "DESCRIBE"))),
    3: Rule(12, metadata_of_topic, ((T, TOPIC, "DESCRIBE"),),
            _d((T, "DESCRIBE"), (T, "CREATE"), (C, "CREATE"), (C, "DESCRIBE"))),
    18: Rule(3, api_versions, (), _d(), public=True),
    75: Rule(0, describe_topic_partitions, ((T, TOPIC, "DESCRIBE"),), _d((T, "DESCRIBE"))),
    19: Rule(7, create_topics, ((T, NEW_TOPIC, "CREATE"),), _d((C, "CREATE"), (T, "CREATE"),
                                                                  (T, "DESCRIBE_CONFIGS"))),
    20: Rule(6, delete_topics, ((T, DELETED_TOPIC, "DELETE"),), _d((T, "DELETE"), (T, "DESCRIBE"))),
    21: Rule(2, delete_records, ((T, TOPIC, "DELETE"),), _d((T, "DELETE"))),
    22: Rule(4, init_producer_id_transactional, ((X, TXN, "WRITE"),),
             _d((X, "WRITE"), (C, "IDEMPOTENT_WRITE"), (T, "WRITE"))),
    23: Rule(4, offset_for_leader_epoch, ((T, TOPIC, "DESCRIBE"),), _d((C, "CLUSTER_ACTION"), (T, "DESCRIBE"))),
    32: Rule(4, describe_configs, ((T, TOPIC, "DESCRIBE_CONFIGS"),), _d((T, "DESCRIBE_CONFIGS"),
                                                                          (C, "DESCRIBE_CONFIGS"),
                                                                          (G, "DESCRIBE_CONFIGS"))),
    33: Rule(2, alter_configs, ((T, TOPIC, "ALTER_CONFIGS"),), _d((T, "ALTER_CONFIGS"), (C, "ALTER_CONFIGS"))),
    34: Rule(2, alter_replica_log_dirs, ((C, CLUSTER, "ALTER"),), _d((C, "ALTER"))),
    35: Rule(4, describe_log_dirs, ((C, CLUSTER, "DESCRIBE"),), _d((C, "DESCRIBE"))),
    37: Rule(3, create_partitions, ((T, TOPIC, "ALTER"),), _d((T, "ALTER"))),
    43: Rule(2, elect_leaders, ((C, CLUSTER, "ALTER"),), _d((C, "ALTER"))),
    44: Rule(1, incremental_alter_configs, ((T, TOPIC, "ALTER_CONFIGS"),), _d((T, "ALTER_CONFIGS"),
                                                                              (C, "ALTER_CONFIGS"),
                                                                              (G, "ALTER_CONFIGS"))),
    45: Rule(0, alter_partition_reassignments, ((C, CLUSTER, "ALTER"),), _d((C, "ALTER"))),
    46: Rule(0, list_partition_reassignments, ((C, CLUSTER, "DESCRIBE"),), _d((C, "DESCRIBE"))),
    60: Rule(1, describe_cluster, ((C, CLUSTER, "DESCRIBE"),), _d((C, "DESCRIBE")),
             hides=_hides_cluster_operations),
    8: Rule(8, offset_commit, ((G, GROUP, "READ"), (T, TOPIC, "READ")), _d((G, "READ"), (T, "READ"))),
    9: Rule(8, offset_fetch, ((G, GROUP, "DESCRIBE"), (T, TOPIC, "DESCRIBE")), _d((G, "DESCRIBE"), (T, "DESCRIBE"))),
    10: Rule(4, find_coordinator, ((G, GROUP, "DESCRIBE"),), _d((G, "DESCRIBE"), (X, "DESCRIBE"))),
    11: Rule(7, join_group, ((G, GROUP, "READ"),), _d((G, "READ"))),
    12: Rule(4, heartbeat, ((G, GROUP, "READ"),), _d((G, "READ"))),
    13: Rule(4, leave_group, ((G, GROUP, "READ"),), _d((G, "READ"))),
    14: Rule(5, sync_group, ((G, GROUP, "READ"),), _d((G, "READ"))),
    15: Rule(5, describe_groups, ((G, GROUP, "DESCRIBE"),), _d((G, "DESCRIBE"))),
    16: Rule(4, list_groups, ((G, GROUP, "DESCRIBE"),), _d((C, "DESCRIBE"), (G, "DESCRIBE")), hides=_hides_groups),
    42: Rule(2, delete_groups, ((G, "conf-gone", "DELETE"),), _d((G, "DELETE"))),
    68: Rule(1, consumer_group_heartbeat, ((G, KIP848_GROUP, "READ"), (T, TOPIC, "DESCRIBE")),
             _d((G, "READ"), (T, "DESCRIBE"))),
    # the heartbeat's member subscribes to TOPIC: describing its group needs DESCRIBE on that topic too
    69: Rule(1, consumer_group_describe, ((G, KIP848_GROUP, "DESCRIBE"), (T, TOPIC, "DESCRIBE")),
             _d((G, "DESCRIBE"), (T, "DESCRIBE"))),
    76: Rule(1, share_group_heartbeat, ((G, SHARE_GROUP, "READ"), (T, TOPIC, "DESCRIBE")),
             _d((G, "READ"), (T, "DESCRIBE"))),
    77: Rule(1, share_group_describe, ((G, SHARE_GROUP, "DESCRIBE"), (T, TOPIC, "DESCRIBE")),
             _d((G, "DESCRIBE"), (T, "DESCRIBE"))),
    78: Rule(1, share_fetch, ((G, SHARE_GROUP, "READ"), (T, TOPIC, "READ")), _d((G, "READ"), (T, "READ"))),
    79: Rule(1, share_acknowledge, ((G, SHARE_GROUP, "READ"),), _d((G, "READ"), (T, "READ"))),
    84: Rule(0, read_share_group_state, ((C, CLUSTER, "CLUSTER_ACTION"),), _d((C, "CLUSTER_ACTION"))),
    85: Rule(0, write_share_group_state, ((C, CLUSTER, "CLUSTER_ACTION"),), _d((C, "CLUSTER_ACTION"))),
    86: Rule(0, delete_share_group_state, ((C, CLUSTER, "CLUSTER_ACTION"),), _d((C, "CLUSTER_ACTION"))),
    90: Rule(1, describe_share_group_offsets, ((G, SHARE_GROUP, "DESCRIBE"), (T, TOPIC, "DESCRIBE")),
             _d((G, "DESCRIBE"), (T, "DESCRIBE"))),
    91: Rule(0, alter_share_group_offsets, ((G, SHARE_GROUP, "READ"), (T, TOPIC, "READ")),
             _d((G, "READ"), (T, "READ"))),
    92: Rule(0, delete_share_group_offsets, ((G, SHARE_GROUP, "DELETE"), (T, TOPIC, "READ")),
             _d((G, "DELETE"), (T, "READ"))),
    47: Rule(0, offset_delete, ((G, GROUP, "DELETE"), (T, TOPIC, "READ")), _d((G, "DELETE"), (T, "READ"))),
    24: Rule(3, add_partitions_to_txn, ((X, TXN, "WRITE"), (T, TOPIC, "WRITE")),
             _d((X, "WRITE"), (T, "WRITE"), (C, "CLUSTER_ACTION"))),
    25: Rule(3, add_offsets_to_txn, ((X, TXN, "WRITE"), (G, GROUP, "READ")), _d((X, "WRITE"), (G, "READ"))),
    26: Rule(3, end_txn, ((X, TXN, "WRITE"),), _d((X, "WRITE"))),
    27: Rule(1, write_txn_markers, ((C, CLUSTER, "CLUSTER_ACTION"),), _d((C, "ALTER"), (C, "CLUSTER_ACTION"))),
    28: Rule(3, txn_offset_commit, ((X, TXN, "WRITE"), (G, GROUP, "READ"), (T, TOPIC, "READ")),
             _d((X, "WRITE"), (G, "READ"), (T, "READ"))),
    61: Rule(0, describe_producers, ((T, TOPIC, "READ"),), _d((T, "READ"))),
    65: Rule(0, describe_transactions, ((X, TXN, "DESCRIBE"),), _d((X, "DESCRIBE"), (T, "DESCRIBE"))),
    66: Rule(1, list_transactions, ((X, TXN, "DESCRIBE"),), _d((X, "DESCRIBE")), hides=_hides_transactions),
    17: Rule(1, sasl_handshake, (), _d(), public=True),
    36: Rule(2, sasl_authenticate, (), _d(), public=True),
    29: Rule(3, describe_acls, ((C, CLUSTER, "DESCRIBE"),), _d((C, "DESCRIBE"))),
    30: Rule(3, create_acls, ((C, CLUSTER, "ALTER"),), _d((C, "ALTER"))),
    31: Rule(3, delete_acls, ((C, CLUSTER, "ALTER"),), _d((C, "ALTER"))),
    50: Rule(0, describe_user_scram_credentials, ((C, CLUSTER, "DESCRIBE"),), _d((C, "DESCRIBE"))),
    51: Rule(0, alter_user_scram_credentials, ((C, CLUSTER, "ALTER"),), _d((C, "ALTER"))),
    48: Rule(1, describe_client_quotas, ((C, CLUSTER, "DESCRIBE_CONFIGS"),), _d((C, "DESCRIBE_CONFIGS"))),
    49: Rule(1, alter_client_quotas, ((C, CLUSTER, "ALTER_CONFIGS"),), _d((C, "ALTER_CONFIGS"))),
}

# Answers to a principal that may not describe everything: left out, not refused.
FILTERED_ALSO = {3: (metadata_all, _hides_topics), 75: (describe_all_topic_partitions, _hides_topics)}
