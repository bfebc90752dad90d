"""Numbers tests measure (failover times, chaos tallies): printed where they are taken and listed
again at the end of the run (see conftest.pytest_terminal_summary), so a run's log keeps them
without -s."""

from __future__ import annotations

NOTED: list[str] = []


def note(line: str) -> None:
    NOTED.append(line.strip())
    print("\n" + line.strip())
