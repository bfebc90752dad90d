"""ADR 0039's step: work whose size grows with the partition count (applying metadata, copying figures for
a scrape, encoding a Metadata answer, refreshing a follower's fetch plan, what a fetch answer carries) does
at most this many partitions between two turns of the event loop."""

PARTITIONS_PER_STEP = 500
