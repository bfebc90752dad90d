"""Batch: read `clicks` and `clicks-per-minute` back from dm (and the Parquet copy) and compare.

    python examples/clickstream/batch_job.py --bootstrap 127.0.0.1:9092
"""

from __future__ import annotations

from jobs import arguments, read_back, session


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    result = read_back(session("clickstream-batch"), args.bootstrap, args.source, args.sink_topic, args.parquet)
    print(f"{'page':<12} {'raw clicks':>10} {'topic':>8} {'parquet':>8}   ({result['minutes']} finished minutes)")
    for page in sorted(result["raw"]):
        print(f"{page:<12} {result['raw'][page]:>10} {result['topic'].get(page, 0):>8} "
              f"{result['parquet'].get(page, 0):>8}")
    same = result["raw"] == result["topic"] == result["parquet"]
    print("counts agree" if same else "counts DIFFER")
    raise SystemExit(0 if same else 1)


if __name__ == "__main__":
    main()
