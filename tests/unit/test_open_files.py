"""The open-file limit: raised to the hard limit, and a warning when the open segments need more."""

from __future__ import annotations

import resource

from dm_broker import open_files


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        lower = min(soft, 1024) if hard == resource.RLIM_INFINITY else min(hard - 1, 1024)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lower, hard))
        limit = open_files.raise_soft_limit()
        now_soft, now_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        assert now_hard == hard and limit == now_soft and now_soft > lower
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_limit_below_the_open_segments_is_named_with_the_remedy() -> None:
    assert open_files.shortfall(20_000, 10_000) is None
    problem = open_files.shortfall(20_000, 30_000)
    assert problem is not None
    assert "20000" in problem and "30000 open log segments" in problem and "ulimit -n" in problem
    # the headroom for sockets and writes counts
    assert open_files.shortfall(20_000, 20_000 - open_files.HEADROOM) is None
    assert open_files.shortfall(20_000, 20_000 - open_files.HEADROOM + 1) is not None


def test_connections_are_refused_before_they_take_the_logs_descriptors() -> None:
    from dm_broker.config import BrokerConfig
    from dm_broker.connection_quotas import ConnectionQuotas

    assert open_files.connection_budget(20000, 1000) == 20000 - 1000 - open_files.RESERVED_FOR_LOGS
    assert open_files.connection_budget(1000, 900) == 0
    budget = [3]
    quotas = ConnectionQuotas(BrokerConfig.build({}, environ={}), "REPLICATION", lambda: budget[0])
    assert [quotas.refusal("CLIENTS", "10.0.0.1") for _ in range(3)] == [None] * 3
    refused = quotas.refusal("CLIENTS", "10.0.0.2")
    assert refused is not None and "open-file limit" in refused and "ulimit -n" in refused
    assert quotas.refusal("REPLICATION", "10.0.0.9") is None  # brokers may still take a share of the reserve
    budget[0] = 10  # segments deleted: room again
    assert quotas.refusal("CLIENTS", "10.0.0.2") is None


def test_capacity_refusal_counts_what_a_broker_would_host():
    from dm_broker.controller.placement import capacity_refusal

    assert capacity_refusal({0: 400}, {0: 100}, {0: 1024}, 512) is None  # 500 <= 512
    refused = capacity_refusal({0: 400}, {0: 113}, {0: 1024}, 512)
    assert refused is not None and "broker 0 would host 513 partition replicas" in refused and "ulimit -n" in refused
    assert capacity_refusal({0: 10**6}, {0: 1}, {}, 512) is None  # a limit not reported: not checked
    assert capacity_refusal({1: 10**6}, {0: 1}, {0: 1024, 1: 1024}, 512) is None  # only brokers that gain


async def test_topics_that_would_not_fit_a_brokers_open_file_limit_are_refused(tmp_path):
    from dm_broker.controller.controller import ControllerError
    from dm_broker.controller.models import CreatePartitionsRequest, CreateTopicRequest, RegisterRequest
    from test_controller import make

    c, _, _ = await make(tmp_path, brokers=1)
    await c.register(RegisterRequest(node_id=0, host="h", port=9000, incarnation="limited", open_file_limit=1536))
    c.brokers[0].fenced = False
    await c.create_topic(CreateTopicRequest(name="fits", partitions=1000, replication_factor=1))  # 1000 <= 1024
    try:
        await c.create_topic(CreateTopicRequest(name="big", partitions=100, replication_factor=1))
        raise AssertionError("a topic past the limit was created")
    except ControllerError as exc:
        assert exc.error == "policy_violation" and "would host 1100" in exc.message
    assert "big" not in c.topics
    with_more = CreatePartitionsRequest(count=1100)
    try:
        await c.create_partitions("fits", with_more)
        raise AssertionError("partitions past the limit were added")
    except ControllerError as exc:
        assert exc.error == "policy_violation"
    await c.create_partitions("fits", CreatePartitionsRequest(count=1024))


async def test_reassignments_that_would_not_fit_a_brokers_open_file_limit_are_refused(tmp_path):
    from dm_broker.controller.models import CreateTopicRequest, ReassignmentRequest, RegisterRequest
    from test_controller import make

    c, _, _ = await make(tmp_path, brokers=2)
    await c.register(RegisterRequest(node_id=1, host="h", port=9001, incarnation="limited", open_file_limit=515))
    c.brokers[1].fenced = False
    await c.create_topic(CreateTopicRequest(name="t", partitions=6, replication_factor=1, assignments=[[0]] * 6))
    moves = [ReassignmentRequest(topic="t", partition=i, replicas=[1]) for i in range(6)]
    results = await c.alter_reassignments(moves)
    assert [r.error for r in results] == [None, None, None, "policy_violation", "policy_violation",
                                          "policy_violation"]  # room for 3 on broker 1
    assert "broker 1 would host 4 partition replicas" in (results[3].message or "")
