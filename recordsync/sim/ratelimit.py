"""The platform's shared record rate limit: a sliding window per merchant (spec: Limits).

``record_requests`` per ``record_seconds``, shared by records and record-changes, counted when
a request arrives (after authentication).  A request over the limit is refused with 429 and
does not take a place in the window.  The window runs on a monotonic clock: it is about the
real spacing of requests, not about the simulator's (possibly skewed) wall clock.
"""

from __future__ import annotations

import math
import threading
from collections import deque


class SlidingWindow:
    def __init__(self, requests: int, seconds: float) -> None:
        self.requests = requests
        self.seconds = seconds
        self._arrivals: dict[str, deque[float]] = {}
        self._lock = threading.Lock()
        self.max_in_window = 0

    def admit(self, merchant_id: str, now: float) -> float | None:
        """None when admitted (and counted); otherwise the seconds until a place frees up."""
        with self._lock:
            arrivals = self._arrivals.setdefault(merchant_id, deque())
            while arrivals and arrivals[0] <= now - self.seconds:
                arrivals.popleft()
            if len(arrivals) >= self.requests:
                return arrivals[0] + self.seconds - now
            arrivals.append(now)
            self.max_in_window = max(self.max_in_window, len(arrivals))
            return None

    def release(self, merchant_id: str, arrival: float) -> None:
        """Give back the place of an admitted request that was then refused (an injected 429)."""
        with self._lock:
            arrivals = self._arrivals.get(merchant_id)
            if arrivals is not None and arrival in arrivals:
                arrivals.remove(arrival)


def retry_after_header(wait_seconds: float) -> str:
    """Retry-After in whole seconds, never 0 (a client must not come back at once)."""
    return str(max(1, math.ceil(wait_seconds)))
