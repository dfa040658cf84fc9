"""The consoles the commands print their findings on (rich).

rich ends the process itself when the reader of stdout goes away (``recordsync report |
head``): ``SystemExit(1)``, an exit code that says "failed" for output nobody wanted any
more.  Our console raises ``BrokenPipeError`` instead, which ``cli.main`` turns into the
quiet exit a shell expects of a process whose pipe closed.
"""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console


class PipeConsole(Console):
    """A rich console that lets a closed pipe reach the command's caller."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


def utc_to_the_second(value: datetime) -> str:
    """UTC to the second, ``Z``: short enough that a table of two times fits an 80-column pipe
    whole (``+00:00`` and microseconds made rich cut every time to ``...+00:``)."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
