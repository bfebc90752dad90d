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
