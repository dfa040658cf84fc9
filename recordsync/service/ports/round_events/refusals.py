"""The log of refused notifications, at most one line per reason per interval.

The events port faces the internet: a line per refusal would let anyone grow the log as fast
as they can send requests (250 strangers were 250 WARNING lines).  Every refusal is counted in
``recordsync_round_events_total`` exactly; the log says that a kind of refusal happens, and how
often: the first of a reason is logged at once, those that follow within ``interval`` only
add to the ``count`` of the next line of that reason.  A reason is the error code and the
configured merchant named (or none), so a stranger's flood of one kind cannot hide a
merchant's wrong secret, and the number of reasons is bounded by the configuration.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

import structlog

from recordsync.core.log_throttle import LogThrottle

log = structlog.get_logger("recordsync.events")

DEFAULT_INTERVAL_S: Final = 60.0


class RefusalLog:
    """``refused(...)`` for every refusal; logs ``round_event_refused`` when its reason is due.

    Thread-safe: the event loop refuses on heads, the workers on bodies."""

    def __init__(
        self,
        *,
        interval: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lines: LogThrottle[tuple[str, str | None]] = LogThrottle(interval, clock)

    def refused(
        self,
        *,
        status: int,
        code: str,
        message: str,
        merchant_id: str | None,
        method: str,
        size: int,
    ) -> None:
        """``merchant_id`` is a configured merchant or None, never a stranger's header."""
        count = self._lines.due((code, merchant_id))
        if count is None:
            return
        log.warning(
            "round_event_refused",
            status=status,
            code=code,
            reason=message,
            merchant_id=merchant_id,
            method=method[:10],
            bytes=size,
            count=count,  # refusals of this reason since its previous line, this one included
            interval_s=self._lines.interval,
        )
