from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import STARTED_PROCESSES, BrokerProcess


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker shared by tests that only need a working broker; each test uses its own topics."""
    proc = BrokerProcess(tmp_path_factory.mktemp("shared") / "data", {"log.index.interval.bytes": 1024})
    proc.start()
    yield proc
    assert proc.alive(), "the shared broker died during the session:\n" + proc.log_tail()
    proc.stop()
    log = proc.log_path.read_text(errors="replace")
    assert "unexpected error" not in log and "Traceback" not in log, "the shared broker logged a crash:\n" + log[-5000:]


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In a pytest-xdist worker: hand what its tests noted to the controller, which prints the summary."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        from measurements import NOTED

        workeroutput["noted"] = list(NOTED)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    from measurements import NOTED

    NOTED.extend(getattr(node, "workeroutput", {}).get("noted", []))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from measurements import NOTED

    if NOTED:
        terminalreporter.section("measurements")
        for line in NOTED:
            terminalreporter.write_line(line)


_STARTED = pytest.StashKey[float]()  # when the test's setup began


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A failed test shows the log tail of every broker and controller that wrote its log while the test
    ran (not the worker's shared broker serving other tests): the failure of a test that talks to
    processes is usually explained there, and a CI run keeps nothing else (a timeout in particular
    leaves only the test's own stack)."""
    outcome = yield
    report = outcome.get_result()
    if call.when == "setup":
        item.stash[_STARTED] = call.start
    if not report.failed or call.when not in ("setup", "call"):
        return
    since = item.stash.get(_STARTED, call.start)
    for process in STARTED_PROCESSES:
        try:
            written = process.log_path.stat().st_mtime >= since
        except OSError:
            continue
        if written:
            report.sections.append((f"log {process.log_path}", process.log_tail()))
