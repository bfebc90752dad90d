"""Structured Streaming: JSON clicks from dm → counts per page per minute → dm topic + Parquet.

    python examples/clickstream/stream_job.py --bootstrap 127.0.0.1:9092 --available-now
"""

from __future__ import annotations

from jobs import arguments, session, start_stream


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="./data/clickstream/checkpoint")
    parser.add_argument("--available-now", action="store_true",
                        help="process what is there and stop (default: run until Ctrl-C, a batch every 5 s)")
    args = parser.parse_args(argv)
    spark = session("clickstream-stream")
    query = start_stream(spark, args.bootstrap, args.source, args.sink_topic, args.parquet, args.checkpoint,
                         args.available_now)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    print(f"stream_job: {sum(p['numInputRows'] for p in query.recentProgress)} clicks read in "
          f"{len(query.recentProgress)} micro-batches (this run)")


if __name__ == "__main__":
    main()
