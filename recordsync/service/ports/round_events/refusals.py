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

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import structlog

log = structlog.get_logger("recordsync.events")

DEFAULT_INTERVAL_S: Final = 60.0


@dataclass(slots=True)
class _Reason:
    next_line_at: float
    unlogged: int = 0


class RefusalLog:
    """``refused(...)`` for every refusal; logs ``round_event_refused`` when its reason is due.

    Thread-safe: the event loop refuses on heads, the workers on bodies."""

    def __init__(
        self,
        *,
        interval: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._interval = interval
        self._clock = clock
        self._reasons: dict[tuple[str, str | None], _Reason] = {}
        self._lock = threading.Lock()

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
        now = self._clock()
        with self._lock:
            reason = self._reasons.get((code, merchant_id))
            if reason is not None and now < reason.next_line_at:
                reason.unlogged += 1
                return
            count = 1 if reason is None else reason.unlogged + 1
            self._reasons[code, merchant_id] = _Reason(now + self._interval)
        log.warning(
            "round_event_refused",
            status=status,
            code=code,
            reason=message,
            merchant_id=merchant_id,
            method=method[:10],
            bytes=size,
            count=count,  # refusals of this reason since its previous line, this one included
            interval_s=self._interval,
        )
