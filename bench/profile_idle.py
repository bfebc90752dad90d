"""Where an idle broker spends its CPU at a given partition count (issue 31): py-spy samples one
broker of a local 3-broker cluster with `--partitions` RF 3 partitions and no client.

    .venv/bin/python -m bench.profile_idle [--partitions 3000] [--seconds 20] [--out docs/bench/idle.collapsed]

Writes py-spy's collapsed stacks (flame graph input: `flamegraph.pl`, speedscope) and prints the dm
functions with the largest inclusive share of the samples.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

from .replication import LocalCluster
from .scale import create_all


def top(collapsed: Path, count: int = 15) -> list[tuple[float, str]]:
    inclusive: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        total += int(samples)
        for frame in set(stack.split(";")):
            inclusive[frame] += int(samples)
    return [(n / max(total, 1) * 100, frame) for frame, n in inclusive.most_common()
            if "dm_broker" in frame and "cli.py" not in frame and "app.py" not in frame][:count]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", type=int, default=3000)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--out", default="docs/bench/idle.collapsed")
    args = parser.parse_args()
    spy = shutil.which("py-spy")
    if spy is None:
        raise SystemExit("py-spy is not installed (pip install py-spy; it is in the bench extra)")
    with LocalCluster(3, overrides=[]) as cluster:
        create_all(cluster, args.partitions)
        time.sleep(10)
        subprocess.run([spy, "record", "-p", str(cluster.procs[0].pid), "-d", str(args.seconds), "-r", "100",
                        "-f", "raw", "-o", args.out, "--nonblocking"], check=True, capture_output=True)
    for share, frame in top(Path(args.out)):
        print(f"{share:5.1f}%  {frame}")


if __name__ == "__main__":
    main()
