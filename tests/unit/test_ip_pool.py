"""Pod addresses are handed out round robin (as CNI's host-local IPAM does): one given back is
not handed out again until the others have been."""

from __future__ import annotations

import ipaddress

import pytest
from dm_testbed.network import IpPool, NetworkError


def test_a_freed_address_is_not_handed_out_again_at_once() -> None:
    pool = IpPool(ipaddress.ip_network("10.244.1.0/29"))  # six addresses
    first, second = pool.take(), pool.take()
    pool.give_back(first)
    later = [pool.take() for _ in range(4)]
    assert first not in later and second not in later
    assert pool.take() == first, "after a full round, the freed address comes back"
    with pytest.raises(NetworkError):
        pool.take()
