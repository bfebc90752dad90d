"""Logging what anyone may send (a frame, a SASL mechanism name, a login), at a bounded rate.

A client that is not even logged in decides how often these lines are written and what they say: 3,000 SASL
handshakes naming 32 KB mechanisms grew a broker's log by 90.5 MB in 3.3 s (issue 65). Each kind of line is
written at most `burst` times a `period`; the rest are counted and the count said with the next line written,
and what a client sent is cut to a few dozen characters."""

from __future__ import annotations

import logging
import time

SHOWN_CHARS = 64


def shown(text: object) -> str:
    """`text` as a log line may quote it: its repr, cut to SHOWN_CHARS characters."""
    quoted = repr(text)
    return quoted if len(quoted) <= SHOWN_CHARS else f"{quoted[:SHOWN_CHARS]}... ({len(quoted)} characters)"


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, burst: int = 10, period_s: float = 60.0,
                 clock=time.monotonic) -> None:
        self.logger = logger
        self.burst = burst
        self.period_s = period_s
        self.clock = clock
        self._windows: dict[str, tuple[float, int, int]] = {}  # kind -> (window start, written, suppressed)

    def log(self, level: int, kind: str, message: str, *args: object) -> bool:
        """Writes the line unless `kind` already wrote `burst` lines this period; whether it did."""
        now = self.clock()
        start, written, suppressed = self._windows.get(kind, (now, 0, 0))
        if now - start >= self.period_s:
            start, written = now, 0
        if written >= self.burst:
            self._windows[kind] = (start, written, suppressed + 1)
            return False
        if suppressed:
            message += " (%d similar lines left out since the last)"
            args = (*args, suppressed)
        self._windows[kind] = (start, written + 1, 0)
        self.logger.log(level, message, *args)
        return True

    def info(self, kind: str, message: str, *args: object) -> bool:
        return self.log(logging.INFO, kind, message, *args)

    def warning(self, kind: str, message: str, *args: object) -> bool:
        return self.log(logging.WARNING, kind, message, *args)
