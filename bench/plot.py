"""Plots the newest run of bench/results/single-broker.jsonl as a bar chart (docs/bench/).

    .venv/bin/python -m bench.plot
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

RESULTS = Path(__file__).parent / "results" / "single-broker.jsonl"
OUT = Path(__file__).parent.parent / "docs" / "bench"


def main() -> None:
    rows = [json.loads(line) for line in RESULTS.read_text().splitlines() if line.strip()]
    latest = max(r["time"] for r in rows)
    rows = [r for r in rows if r["time"] == latest and "dm" in r]
    names = [r["scenario"] for r in rows]
    dm = [r["dm"]["records_per_s"] for r in rows]
    tansu = [r.get("tansu", {}).get("records_per_s", 0) for r in rows]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], dm, width=0.4, label="dm (disk)")
    if any(tansu):
        ax.bar([i + 0.2 for i in x], tansu, width=0.4, label="Tansu (memory)")
    ax.set_xticks(list(x), names, rotation=20, ha="right")
    ax.set_ylabel("records/s (log scale)")
    ax.set_yscale("log")
    ax.set_title(f"Single broker, client on the same 2-core machine ({latest})")
    ax.legend()
    fig.tight_layout()
    OUT.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT / "single-broker.png", dpi=110)
    print(f"wrote {OUT / 'single-broker.png'}")


if __name__ == "__main__":
    main()
