"""Waits a shared thread must not make: a job on a shared pool gives its thread back instead.

The daemon runs every merchant's periodic jobs (the catalogue, the drift check, the
cross-check) and snapshot workers on a few shared threads (``sync.jobs``).  A job that slept
out a failure there (a step's backoff, the fatal backoff of a refused secret, a 429's
Retry-After) held a thread that every other merchant's jobs waited for: eight failing
catalogue refreshes once stopped all fifty tails of a daemon.  So the job runner
runs such jobs under ``no_waiting()``, and wherever one would wait out a failure it raises
``Deferred`` instead: the runner schedules the job again for when the wait is over and the
thread goes back to the pool at once.

What still waits where it runs is the work itself: a request's round trip (bounded by the
HTTP timeout) and the rate budget's pacing (bounded by the budget's window).  Code that has a
thread of its own (the tail, the anchor, a command) waits as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_NO_WAITING: ContextVar[bool] = ContextVar("recordsync_no_waiting", default=False)


class Deferred(Exception):  # noqa: N818 - a request to run later, not an error
    """Run this job again in ``seconds``: it must not wait in the thread it has now."""

    def __init__(self, seconds: float, reason: str) -> None:
        self.seconds = max(float(seconds), 0.0)
        self.reason = reason
        super().__init__(f"deferred {self.seconds:.3f} s: {reason}")


@contextmanager
def no_waiting() -> Iterator[None]:
    """Within the block, a wait for a failure raises ``Deferred`` (see the module docstring)."""
    token = _NO_WAITING.set(True)
    try:
        yield
    finally:
        _NO_WAITING.reset(token)


def may_wait() -> bool:
    """Whether the running code may wait out a failure in its thread."""
    return not _NO_WAITING.get()
