from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import BrokerProcess


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
