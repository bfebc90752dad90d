"""Everything a broker and a controller write is their user's alone (issue 65): the controller's cluster.json
held every user's SCRAM salt, stored key and server key and the ACLs at 0644, segments and checkpoints were 0644
in directories of 0755."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from clients import ConfluentClient, Rec
from harness import BrokerProcess, ControllerProcess
from secure import add_scram_users

pytestmark = pytest.mark.timeout(120)


def others_can_reach(root: Path) -> list[str]:
    """Every file or directory under `root` (itself included) that its group or others may read, write or enter."""
    found = []
    for path in [root, *root.rglob("*")]:
        mode = path.lstat().st_mode
        if not stat.S_ISLNK(mode) and mode & 0o077:
            found.append(f"{path.relative_to(root.parent)} {stat.filemode(mode)}")
    return found


def test_what_a_broker_and_its_controller_write_is_private(tmp_path):
    controller = ControllerProcess(tmp_path / "controller").start()
    broker = BrokerProcess(tmp_path / "broker", controller_url=controller.url).start()
    try:
        client = ConfluentClient(broker.bootstrap)
        client.create_topic("private", 2, {"cleanup.policy": "compact"})
        client.produce("private", [Rec(b"k", b"v")] * 10)
        add_scram_users(broker.bootstrap, {"alice": "alice-pw"})
        assert client.consume("private", 10)
    finally:
        broker.stop()
        controller.stop()
    [document] = (tmp_path / "controller").rglob("cluster.json")
    assert document.stat().st_mode & 0o777 == 0o600
    assert others_can_reach(tmp_path / "controller") == []
    assert others_can_reach(tmp_path / "broker") == []
