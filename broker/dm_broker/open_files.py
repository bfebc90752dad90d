"""The process's open-file limit: raised to the hard limit at start, and compared with what the
logs hold open.

Every log segment keeps its file open (as Kafka's do), so a broker needs one descriptor per segment
plus its connections. A limit reached does not fail one request: accepts, new segments and flushes
fail together. Raising the soft limit to the hard one is what any server may do unprivileged (the
JVM does it for Kafka); past that, only the operator can help (ulimit -n, systemd LimitNOFILE, the
container runtime), so the broker says so early instead of failing at the first busy hour."""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

# descriptors a broker needs beside its segments: sockets, the controller session, checkpoint and
# index writes in flight, the HTTP port
HEADROOM = 1024
# of those, what client connections may never take: new segments and their indexes, checkpoints, the
# controller session, HTTP; the inter-broker listener may still take INTER_BROKER_SHARE of it
RESERVED_FOR_LOGS = 512
INTER_BROKER_SHARE = 256


def raise_soft_limit() -> int:
    """Raises RLIMIT_NOFILE's soft limit to the hard one; returns the limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, target, exc)
    return soft


def shortfall(limit: int, open_segments: int) -> str | None:
    """Why `limit` is too low for this many open segments and the headroom (None: enough)."""
    needed = open_segments + HEADROOM
    if needed <= limit:
        return None
    return (f"the open-file limit ({limit}) is below what this broker's {open_segments} open log segments "
            f"need ({needed} with {HEADROOM} for connections and writes): new segments, flushes and "
            f"connections will fail once it is reached. Raise it (ulimit -n, systemd LimitNOFILE, the "
            f"container runtime's nofile) or use fewer or larger segments (segment.bytes, segment.ms)")


def connection_budget(limit: int, open_segments: int) -> int:
    """Connections the broker may hold before they would take descriptors its logs need (a roll that
    cannot open its new segment fails the producer's request). Kafka has no such bound: its acceptor and
    its log rolls meet "Too many open files" together, and the log directory goes offline."""
    return max(0, limit - open_segments - RESERVED_FOR_LOGS)
