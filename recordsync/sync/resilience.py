"""How the sync survives failures: wait out what time can fix, never crash-loop.

The client already retries one request a few times.  When it gives up, or the warehouse is
down, the *step* (one page: fetch, then commit) is tried again here with capped exponential
backoff and full jitter, for as long as it takes: a daemon must ride out a platform outage or
a database restart and carry on where the committed state says.  A failure that waiting will
not fix (wrong secret, clock skew, a rejected request) is reported plainly; the daemon keeps
trying slowly so it heals by itself once the cause is fixed (NTP, a rotated secret at the
platform), while a one-shot backfill stops with that error.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, TypeVar

import structlog

from recordsync.core.errors import (
    ClockSkewError,
    FatalPlatformError,
    RetryableError,
    ShutdownRequestedError,
    WarehouseUnavailableError,
)
from recordsync.core.stopping import Stopper
from recordsync.platform.retry import RetryPolicy
from recordsync.sync.events import SyncObserver

T = TypeVar("T")

log = structlog.get_logger("recordsync.sync")

# The client has already retried the request itself; a step that still fails waits longer.
STEP_BACKOFF = RetryPolicy(max_attempts=1, base_delay=1.0, max_delay=60.0)
FATAL_BACKOFF = 300.0


class StepRunner:
    def __init__(
        self,
        *,
        stopper: Stopper,
        observer: SyncObserver,
        fatal_is_final: bool,
        rng: random.Random | None = None,
        logger: Any = None,
    ) -> None:
        self.stopper = stopper
        self.observer = observer
        self.fatal_is_final = fatal_is_final
        self.rng = rng or random.Random()  # noqa: S311 - jitter, not cryptography
        self.log = logger if logger is not None else log

    def run(self, step: Callable[[], T], *, what: str) -> T:
        """Run ``step`` until it returns; raises ``ShutdownRequestedError`` on a stop."""
        failures = 0
        while True:
            if self.stopper.stopped:
                raise ShutdownRequestedError("stop requested")
            try:
                return step()
            except ShutdownRequestedError:
                raise
            except (RetryableError, WarehouseUnavailableError) as exc:
                delay = STEP_BACKOFF.backoff(failures, self.rng)
                failures += 1
                self.observer.error(type(exc).__name__)
                self.log.warning(
                    "step_failed",
                    step=what,
                    error=str(exc),
                    kind=type(exc).__name__,
                    failures=failures,
                    retry_in=round(delay, 3),
                    request_id=getattr(exc, "request_id", None),
                )
                self.stopper.sleep(delay)
            except FatalPlatformError as exc:
                self.observer.error(type(exc).__name__)
                hint = (
                    "the local clock differs from the platform's by more than 300 s: "
                    "fix the time sync (NTP) on this host"
                    if isinstance(exc, ClockSkewError)
                    else "sending the same request again will not help: check the configuration"
                )
                self.log.error(  # noqa: TRY400 - the error says it all; no traceback for operators
                    "step_failed_fatally",
                    step=what,
                    error=str(exc),
                    kind=type(exc).__name__,
                    code=exc.code,
                    hint=hint,
                    request_id=exc.request_id,
                    retry_in=None if self.fatal_is_final else FATAL_BACKOFF,
                )
                if self.fatal_is_final:
                    raise
                self.stopper.sleep(FATAL_BACKOFF)
