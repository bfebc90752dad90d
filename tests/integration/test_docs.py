"""The README's and the quickstart's command blocks, run in order as written against a fresh local
cluster started the way `make run` starts it. A block preceded by `<!-- docs-test: skip (why) -->`
is not run (it starts the cluster itself, runs forever, or is a fragment)."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dm_broker.tools.cluster import busy_ports, plan_ports
from harness import REPO

pytestmark = pytest.mark.timeout(600)

FENCE = re.compile(r"(<!-- docs-test: skip[^\n]*-->\n)?```(sh|python)\n(.*?)```", re.S)


def runnable_blocks(doc: Path) -> list[tuple[str, str]]:
    return [(lang, code) for skip, lang, code in FENCE.findall(doc.read_text()) if not skip]


def as_script(doc: Path, workdir: Path) -> str:
    """One bash session per document (so `source .venv/bin/activate` carries on), stopping at the
    first failing command; python blocks run with the project's interpreter."""
    lines = ["set -e"]
    for i, (lang, code) in enumerate(runnable_blocks(doc)):
        lines.append(f"echo '::block {i} of {doc.name}::' >&2")
        if lang == "python":
            script = workdir / f"{doc.stem}-{i}.py"
            script.write_text(code)
            lines.append(f".venv/bin/python {script}")
        else:
            lines.append(code)
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def cluster_like_make_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`dm up` with make run's arguments (the documented ports), in a scratch directory whose
    `.venv` is the project's."""
    taken = busy_ports(plan_ports(9092, 3, None, None))
    if taken:
        pytest.skip(f"the documented ports are in use ({', '.join(taken)}): is a `make run` cluster running?")
    workdir = tmp_path_factory.mktemp("docs")
    (workdir / ".venv").symlink_to(REPO / ".venv")
    up = subprocess.Popen([sys.executable, "-m", "dm_broker.cli", "up", "--brokers", "3", "--data-dir",
                           str(workdir / "data"), "--port", "9092", "--http-port", "8080"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert up.stdout is not None
    banner = ""
    deadline = time.monotonic() + 90
    while "Press Ctrl-C" not in banner and time.monotonic() < deadline:
        line = up.stdout.readline()
        if not line and up.poll() is not None:
            pytest.fail(f"dm up exited:\n{banner}")
        banner += line
    yield workdir
    up.send_signal(signal.SIGINT)
    up.communicate(timeout=60)


def run_doc(doc: Path, workdir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", as_script(doc, workdir)], cwd=workdir, capture_output=True, text=True,
                          timeout=300)


def test_readme_then_quickstart_work_as_written(cluster_like_make_run: Path) -> None:
    if not shutil.which("kcat"):
        pytest.skip("kcat is not installed (make tools installs it)")
    if not shutil.which("java"):
        pytest.skip("java is not installed (the quickstart reads a topic from Spark; make tools installs it)")
    workdir = cluster_like_make_run
    readme = run_doc(REPO / "README.md", workdir)
    assert readme.returncode == 0, f"README:\n{readme.stdout[-3000:]}\n{readme.stderr[-3000:]}"
    assert "b'k' b'hello'" in readme.stdout
    assert "user1\tclicked" in readme.stdout
    # The group the Python snippet closed shows its committed offsets and lag (a row per partition
    # with a committed offset: topic, partition, current-offset, log-end-offset, lag).
    assert "group readme (classic): state " in readme.stdout, readme.stdout
    described = readme.stdout[readme.stdout.index("group readme (classic): state "):]
    rows = [[c.strip() for c in line.split("│")[1:6]] for line in described.splitlines() if "│ demo" in line]
    assert rows and any(r[2].isdigit() and int(r[2]) >= 1 for r in rows), described

    quickstart = run_doc(REPO / "docs" / "quickstart.md", workdir)
    assert quickstart.returncode == 0, f"quickstart:\n{quickstart.stdout[-3000:]}\n{quickstart.stderr[-3000:]}"
    assert "created topic clicks (6 partitions, replication factor 3)" in quickstart.stdout
    assert "deleted topic clicks" in quickstart.stdout
    assert '"error_code":null' in readme.stdout, readme.stdout  # the README's curl produce

    http = run_doc(REPO / "docs" / "http.md", workdir)
    assert http.returncode == 0, f"http.md:\n{http.stdout[-3000:]}\n{http.stderr[-3000:]}"
    assert '"topic":"http-demo"' in http.stdout, http.stdout  # the consumer instance read records back
    assert '{"offsets":[{"topic":"http-demo","partition":2,"offset":1,"metadata":""}]}' in http.stdout
