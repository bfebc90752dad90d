"""The e2e suite's cluster holds and shared operator installation (tests/e2e/sharing.py), with real
flock(2) locks: each hold opens its own file description, so threads contend as workers do."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from sharing import ClusterHold, SharedInstallation


def _in_thread(target) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_shared_holds_do_not_wait_for_each_other(tmp_path: Path) -> None:
    first, second = ClusterHold(tmp_path), ClusterHold(tmp_path)
    first.take(exclusive=False)
    taken = _in_thread(lambda: second.take(exclusive=False))
    taken.join(5)
    assert not taken.is_alive() and first.held and second.held


def test_an_exclusive_hold_waits_for_shared_ones_and_then_goes_before_later_ones(tmp_path: Path) -> None:
    running, alone, later = ClusterHold(tmp_path), ClusterHold(tmp_path), ClusterHold(tmp_path)
    order: list[str] = []
    running.take(exclusive=False)
    writer = _in_thread(lambda: (alone.take(exclusive=True), order.append("exclusive")))
    time.sleep(0.3)
    assert writer.is_alive(), "the exclusive hold was taken beside a shared one"
    reader = _in_thread(lambda: (later.take(exclusive=False), order.append("shared")))
    time.sleep(0.3)
    assert reader.is_alive(), "a shared hold was taken while an exclusive one waited"
    running.release()
    writer.join(5)
    time.sleep(0.3)
    assert order == ["exclusive"] and reader.is_alive()
    alone.release()
    reader.join(5)
    assert order == ["exclusive", "shared"]


def test_taking_the_other_kind_gives_up_the_first(tmp_path: Path) -> None:
    hold, other = ClusterHold(tmp_path), ClusterHold(tmp_path)
    hold.take(exclusive=True)
    hold.take(exclusive=False)
    assert hold.held and not hold.exclusive
    taken = _in_thread(lambda: other.take(exclusive=False))
    taken.join(5)
    assert not taken.is_alive()


def test_the_first_user_sets_up_and_the_last_tears_down(tmp_path: Path) -> None:
    calls: list[str] = []
    a, b = SharedInstallation(tmp_path, "operator"), SharedInstallation(tmp_path, "operator")
    a.join(lambda: calls.append("up"))
    b.join(lambda: calls.append("up"))
    a.leave(lambda: calls.append("down"))
    assert calls == ["up"]
    b.leave(lambda: calls.append("down"))
    assert calls == ["up", "down"]
    a.join(lambda: calls.append("up"))  # a worker that comes later installs it again
    assert calls == ["up", "down", "up"]


def test_a_failed_set_up_is_tried_again_by_the_next_user(tmp_path: Path) -> None:
    def fail() -> None:
        raise RuntimeError("helm failed")

    installation = SharedInstallation(tmp_path, "operator")
    try:
        installation.join(fail)
    except RuntimeError:
        pass
    calls: list[str] = []
    installation.join(lambda: calls.append("up"))
    assert calls == ["up"]


def test_a_run_removes_what_runs_older_than_a_day_left(tmp_path: Path, monkeypatch) -> None:
    import os
    import time

    import sharing

    monkeypatch.setattr(sharing.tempfile, "gettempdir", lambda: str(tmp_path))
    old, recent = tmp_path / "dm-e2e-runs" / "old", tmp_path / "dm-e2e-runs" / "recent"
    for path in (old, recent):
        path.mkdir(parents=True)
        (path / "hold.lock").write_bytes(b"")
    long_ago = time.time() - sharing.STALE_S - 60
    os.utime(old, (long_ago, long_ago))
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "this-run")
    assert sharing.run_directory() == tmp_path / "dm-e2e-runs" / "this-run"
    assert not old.exists() and recent.exists()
