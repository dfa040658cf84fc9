"""At most one log line per reason per interval, each line counting those it stands for.

A condition that repeats (a pool too small for the load, strangers' refused requests) would
otherwise write a line per occurrence, and the log would grow as fast as the trouble does.
The first occurrence of a reason is logged at once; those that follow within ``interval``
are only counted, into the next line of that reason.  Metrics count every occurrence; the
log says that it happens, and how often.  The caller keeps the number of reasons bounded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

Reason = TypeVar("Reason", bound=Hashable)


@dataclass(slots=True)
class _Due:
    next_line_at: float
    unlogged: int = 0


class LogThrottle(Generic[Reason]):
    """``due(reason)`` for every occurrence; thread-safe."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._reasons: dict[Reason, _Due] = {}
        self._lock = threading.Lock()

    def due(self, reason: Reason) -> int | None:
        """The number of occurrences a line logged now stands for (this one included), or
        None when this one is only counted."""
        now = self._clock()
        with self._lock:
            known = self._reasons.get(reason)
            if known is not None and now < known.next_line_at:
                known.unlogged += 1
                return None
            self._reasons[reason] = _Due(now + self.interval)
            return 1 if known is None else known.unlogged + 1
