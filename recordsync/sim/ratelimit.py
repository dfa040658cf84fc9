"""The platform's shared record rate limit: a sliding window per merchant (spec: Limits).

``record_requests`` per ``record_seconds``, shared by records and record-changes, counted when
a request arrives (after authentication).  A request over the limit is refused with 429 and
does not take a place in the window.  The window runs on a monotonic clock: it is about the
real spacing of requests, not about the simulator's (possibly skewed) wall clock.
"""

from __future__ import annotations

import bisect
import math
import threading

# How much later than a newer request an older one may still be handled: arrivals this far
# behind the newest are forgotten.  A handler thread held up this long is a hung machine.
_LATE_SECONDS = 30.0


class SlidingWindow:
    """At most ``requests`` arrivals in any ``seconds`` (the window ``(t - seconds, t]``).

    Requests are judged as their handler threads get to them, which is not always the order
    they arrived in: under load (the GIL, two cores and three test workers) a request can be
    handled after one that arrived after it.  So the arrivals are kept sorted and a new one is
    judged by every window it falls in, those that end at a later arrival included.  Kept in
    handling order, the count had run on entries out of order: one that had left the window
    stayed behind a newer one and was counted, a violation the client never committed.
    """

    def __init__(self, requests: int, seconds: float) -> None:
        self.requests = requests
        self.seconds = seconds
        self._arrivals: dict[str, list[float]] = {}
        self._lock = threading.Lock()
        self.max_in_window = 0

    def admit(self, merchant_id: str, arrival: float) -> float | None:
        """None when admitted (and counted); otherwise the seconds until a place frees up."""
        with self._lock:
            arrivals = self._arrivals.setdefault(merchant_id, [])
            newest = max(arrivals[-1], arrival) if arrivals else arrival
            del arrivals[: bisect.bisect_right(arrivals, newest - self.seconds - _LATE_SECONDS)]
            fullest, wait = self._fullest_window(arrivals, arrival)
            if fullest > self.requests:
                return wait
            bisect.insort(arrivals, arrival)
            self.max_in_window = max(self.max_in_window, fullest)
            return None

    def _fullest_window(self, arrivals: list[float], arrival: float) -> tuple[int, float]:
        """The most arrivals, ``arrival`` included, in a window that holds it (one ends at it
        or at a later arrival less than ``seconds`` after it), and how long until the first of
        an overfull one leaves it, counted from ``arrival``."""
        fullest, wait = 0, 0.0
        first_later = bisect.bisect_right(arrivals, arrival)
        last_later = bisect.bisect_left(arrivals, arrival + self.seconds)
        ends = [arrival, *arrivals[first_later:last_later]]
        for end in ends:
            oldest = bisect.bisect_right(arrivals, end - self.seconds)
            held = bisect.bisect_right(arrivals, end) - oldest + 1
            fullest = max(fullest, held)
            if held > self.requests:
                wait = max(wait, arrivals[oldest] + self.seconds - arrival)
        return fullest, wait

    def release(self, merchant_id: str, arrival: float) -> None:
        """Give back the place of an admitted request that was then refused (an injected 429)."""
        with self._lock:
            arrivals = self._arrivals.get(merchant_id)
            if arrivals is None:
                return
            at = bisect.bisect_left(arrivals, arrival)
            if at < len(arrivals) and arrivals[at] == arrival:
                del arrivals[at]


def retry_after_header(wait_seconds: float) -> str:
    """Retry-After in whole seconds, never 0 (a client must not come back at once)."""
    return str(max(1, math.ceil(wait_seconds)))
