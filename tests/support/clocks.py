"""The tests' one fake clock: time that moves only when a test moves it or someone sleeps on it.

The code under test takes its clock and its sleep as arguments; a test hands it ``clock`` and
``clock.sleep`` and then reads ``now`` and ``sleeps`` to see what the code waited for, with no
real waiting.  ``now`` is whatever the code expects from its clock: seconds as a float (a
monotonic or a Unix clock) or a ``datetime`` (the database's clock); ``advance`` and ``sleep``
move either by seconds.  Thread-safe, since the engines read their clock from worker threads.
(``recordsync.sim.testing.ManualClock`` is the simulator's own, part of the package's API.)
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Generic, TypeVar

T = TypeVar("T", float, datetime)


class FakeClock(Generic[T]):
    """A clock read by calling it; ``now`` may also be set or moved (``clock.now += 5``).

    ``zero_sleep=False`` makes a sleep of 0 s fail the test where it happens: code that must
    never spin on a zero sleep (a rate budget) is checked at the call that would spin."""

    def __init__(self, start: T, *, zero_sleep: bool = True) -> None:
        self._now: T = start
        self._lock = threading.Lock()
        self._zero_sleep = zero_sleep
        self.sleeps: list[float] = []

    @property
    def now(self) -> T:
        with self._lock:
            return self._now

    @now.setter
    def now(self, value: T) -> None:
        with self._lock:
            self._now = value

    def __call__(self) -> T:
        return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now = _later(self._now, seconds)

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0, f"a sleep of {seconds} s"
        assert self._zero_sleep or seconds > 0, "the code must never spin on a zero sleep"
        with self._lock:
            self.sleeps.append(seconds)
            self._now = _later(self._now, seconds)


def _later(now: T, seconds: float) -> T:
    if isinstance(now, datetime):
        return now + timedelta(seconds=seconds)
    return now + seconds
