"""The container image as built (scripts/kind/images.sh builds it from the Dockerfile), run by the
container engine as a user runs it: its entrypoints, a broker on a read-only root file system with
its data on a volume, produce and consume from the host through a published port, SIGTERM to PID 1
for a clean shutdown, a restart on the same volume that finds every record, and a volume that fills up
(the broker stops and says why where Kubernetes shows it). Without a Docker
engine or the image the tests skip with the reason, unless DM_IMAGE_REQUIRED=1 (set by
scripts/run-tests.sh once it has built the image): then that is a failure."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from harness import free_port

IMAGE = os.environ.get("DM_IMAGE", "dm:e2e")


def docker(*args: str, check: bool = True, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout_s, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


@pytest.fixture(scope="module")
def image() -> str:
    reason = None
    if not shutil.which("docker"):
        reason = "docker is not installed"
    elif docker("info", check=False).returncode != 0:
        reason = "no Docker engine answers (scripts/kind/engine.sh starts one)"
    elif docker("image", "inspect", IMAGE, check=False).returncode != 0:
        reason = f"the image {IMAGE} is not built (scripts/kind/images.sh)"
    if reason:
        if os.environ.get("DM_IMAGE_REQUIRED") == "1":
            pytest.fail(f"DM_IMAGE_REQUIRED=1 but {reason}")
        pytest.skip(reason)
    return IMAGE


def test_entrypoints_and_user(image: str) -> None:
    assert docker("run", "--rm", image, "--version").stdout.strip() == "dm 0.1.0"
    assert "usage: dm-operator" in docker("run", "--rm", "--entrypoint", "dm-operator", image, "--help").stdout
    assert docker("run", "--rm", "--entrypoint", "id", image).stdout.split()[0] == "uid=10001(dm)"
    # The operator's dependencies are all there (the image trims the kubernetes client's asyncio copy).
    imports = "import kopf, kubernetes.client, kubernetes.watch, dm_operator.main, dm_broker.cli; print('ok')"
    assert docker("run", "--rm", "--entrypoint", "python", image, "-c", imports).stdout.strip() == "ok"
    size = int(docker("image", "inspect", "-f", "{{.Size}}", image).stdout)
    print(f"\n{image}: {size / 1e6:.0f} MB")


class Broker:
    """`dm broker` in a container: read-only root, /tmp a tmpfs, /var/lib/dm a named volume."""

    def __init__(self, image: str, volume: str, port: int, mounts: tuple[str, ...] = (),
                 overrides: tuple[str, ...] = ()) -> None:
        """`volume`: a named volume for /var/lib/dm, or "" when `mounts` (docker run options) provide it."""
        self.name = f"dm-image-test-{uuid.uuid4().hex[:8]}"
        data = ("-v", f"{volume}:/var/lib/dm") if volume else ()
        docker("run", "-d", "--name", self.name, "--read-only", "--tmpfs", "/tmp", *data, *mounts,
               "-p", f"127.0.0.1:{port}:{port}", image, "broker", "--host", "0.0.0.0", "--advertised-host",
               "127.0.0.1", "--port", str(port), "--http-port", "-1", "--data-dir", "/var/lib/dm/data",
               *(arg for o in overrides for arg in ("--override", o)))
        deadline = time.monotonic() + 60
        while "ready:" not in self.logs():
            assert time.monotonic() < deadline, f"the broker did not start:\n{self.logs()}"
            assert docker("inspect", "-f", "{{.State.Running}}", self.name).stdout.strip() == "true", self.logs()
            time.sleep(0.2)

    def logs(self) -> str:
        result = docker("logs", self.name, check=False)
        return result.stdout + result.stderr

    def stop(self) -> int:
        """SIGTERM (docker stop), then the exit code."""
        docker("stop", "--time", "30", self.name, timeout_s=60)
        return int(docker("inspect", "-f", "{{.State.ExitCode}}", self.name).stdout)

    def remove(self) -> None:
        docker("rm", "-f", self.name, check=False)


@pytest.fixture
def volume(image: str) -> Iterator[str]:
    name = f"dm-image-test-{uuid.uuid4().hex[:8]}"
    docker("volume", "create", name)
    yield name
    docker("volume", "rm", "-f", name, check=False)


def read_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < expected and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg.value())
    consumer.close()
    return got


def test_a_broker_on_a_read_only_root_keeps_its_data_on_the_volume(image: str, volume: str) -> None:
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    broker = Broker(image, volume, port)
    try:
        # Nothing can be written outside the volume and /tmp.
        probe = docker("exec", broker.name, "python", "-c", "open('/oops', 'w')", check=False)
        assert probe.returncode != 0 and "Read-only file system" in probe.stderr
        admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the future resolves
        admin.create_topics([NewTopic("image", 2, 1)])["image"].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
        for i in range(500):
            producer.produce("image", key=b"k%d" % (i % 7), value=b"v%d" % i)
        assert producer.flush(30) == 0
        assert sorted(read_all(bootstrap, "image", 500)) == sorted(b"v%d" % i for i in range(500))

        # SIGTERM reaches the broker as PID 1 (exec-form entrypoint): a clean shutdown, exit 0.
        assert broker.stop() == 0, broker.logs()
        assert "stopped cleanly" in broker.logs()
    finally:
        broker.remove()

    again = Broker(image, volume, port)
    try:
        assert "previous shutdown clean" in again.logs(), again.logs()
        assert len(read_all(bootstrap, "image", 500)) == 500, "every record survives on the volume"
    finally:
        again.remove()


def test_a_full_volume_stops_the_broker_with_its_reason_in_the_termination_log(image: str, tmp_path) -> None:
    """The data volume is a 6 MB tmpfs owned by the image's user; /dev/termination-log is a file, as the
    kubelet mounts one into every container (ADR 0041)."""
    termination_log = tmp_path / "termination-log"
    termination_log.write_text("")
    termination_log.chmod(0o666)
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    broker = Broker(image, "", port, mounts=("--tmpfs", "/var/lib/dm:size=6m,uid=10001,gid=10001",
                                             "-v", f"{termination_log}:/dev/termination-log"),
                    overrides=("log.dir.min.free.bytes=0",))
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("fills", 1, 1)])["fills"].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": 5000})
        deadline = time.monotonic() + 90
        while docker("inspect", "-f", "{{.State.Running}}", broker.name).stdout.strip() == "true":
            assert time.monotonic() < deadline, f"the broker did not stop:\n{broker.logs()}"
            for _ in range(500):
                try:
                    producer.produce("fills", value=b"x" * 1000)
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0.05)
        producer.purge()
        assert int(docker("inspect", "-f", "{{.State.ExitCode}}", broker.name).stdout) == 1, broker.logs()
        reason = termination_log.read_text()
        assert "log directory /var/lib/dm/data failed" in reason and "No space left on device (ENOSPC)" in reason
        assert "the broker stops" in reason and reason in broker.logs() + "\n", (reason, broker.logs())
    finally:
        broker.remove()
