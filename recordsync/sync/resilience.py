"""How the sync survives failures: wait out what time can fix, never crash-loop.

The client already retries one request a few times.  When it gives up, or the warehouse is
down, the *step* (one page: fetch, then commit) is tried again here with capped exponential
backoff and full jitter, for as long as it takes: a daemon must ride out a platform outage or
a database restart and carry on where the committed state says.  A failure that waiting will
not fix (wrong secret, clock skew, a rejected request) is reported plainly; the daemon keeps
trying slowly so it heals by itself once the cause is fixed (NTP, a rotated secret at the
platform), while a one-shot backfill stops with that error.

A one-shot command cannot wait for ever for a platform it cannot reach (a mistyped name, a
firewall): given ``give_up_after``, a step that has found no way to the platform
(``TransportError``) for that long ends as ``PlatformUnreachableError``, naming the last
cause.  Any answer from the platform, even an error, restarts the count.

Where the step runs on a shared pool's thread (``core.waiting``), the runner never sleeps
there: it raises ``Deferred`` with the wait, the job runs again when it is over, and the
runner, kept by the job, goes on counting the failures so the backoff still grows.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import structlog

from recordsync.core.errors import (
    ClockSkewError,
    FatalPlatformError,
    PlatformUnreachableError,
    RateLimitedError,
    RetryableError,
    ShutdownRequestedError,
    TransportError,
    WarehouseUnavailableError,
)
from recordsync.core.stopping import Stopper
from recordsync.core.waiting import Deferred, may_wait
from recordsync.platform.retry import RetryPolicy
from recordsync.sync.events import SyncObserver

T = TypeVar("T")

log = structlog.get_logger("recordsync.sync")

# The client has already retried the request itself (unless its caller may not wait, a job on a
# shared pool: then this is the one retry); a step that still fails waits longer.
STEP_BACKOFF = RetryPolicy(max_attempts=1, base_delay=1.0, max_delay=60.0)
FATAL_BACKOFF = 300.0


class StepRunner:
    """Runs steps until they succeed; one runner per job, so that its consecutive failures
    (``failures``) are counted across the job's deferred runs."""

    def __init__(
        self,
        *,
        stopper: Stopper,
        observer: SyncObserver,
        fatal_is_final: bool,
        rng: random.Random | None = None,
        logger: Any = None,
        give_up_after: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stopper = stopper
        self.observer = observer
        self.fatal_is_final = fatal_is_final
        self.rng = rng or random.Random()  # noqa: S311 - jitter, not cryptography
        self.log = logger if logger is not None else log
        self.failures = 0  # in a row, across deferred runs; a step that succeeds resets it
        self.give_up_after = give_up_after
        self.clock = clock
        self._unreachable_since: float | None = None
        self._attempt_started = 0.0

    def run(self, step: Callable[[], T], *, what: str) -> T:
        """Run ``step`` until it returns; raises ``ShutdownRequestedError`` on a stop, and
        ``Deferred`` instead of a wait where the thread must not wait."""
        while True:
            if self.stopper.stopped:
                raise ShutdownRequestedError("stop requested")
            self._attempt_started = self.clock()
            try:
                result = step()
            except ShutdownRequestedError:
                raise
            except (RetryableError, WarehouseUnavailableError) as exc:
                self._give_up_if_unreachable(exc, what)
                delay = STEP_BACKOFF.backoff(self.failures, self.rng)
                if isinstance(exc, RateLimitedError):
                    delay = max(delay, exc.retry_after)  # the platform said how long
                self.failures += 1
                self.observer.error(type(exc).__name__)
                self.log.warning(
                    "step_failed",
                    step=what,
                    error=str(exc),
                    kind=type(exc).__name__,
                    failures=self.failures,
                    retry_in=round(delay, 3),
                    request_id=getattr(exc, "request_id", None),
                )
                self._wait(delay, what)
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
                self.failures += 1
                self._wait(FATAL_BACKOFF, what)
            else:
                self.failures = 0
                self._unreachable_since = None
                return result

    def _give_up_if_unreachable(self, exc: Exception, what: str) -> None:
        """Raise ``PlatformUnreachableError`` once no attempt reached the platform for
        ``give_up_after`` seconds; any other failure (an answer) restarts the count."""
        if self.give_up_after is None:
            return
        if not isinstance(exc, TransportError):
            self._unreachable_since = None
            return
        if self._unreachable_since is None:
            # From the attempt's start: the client has retried the request for a while
            # already before the step failed.
            self._unreachable_since = self._attempt_started
        waited = self.clock() - self._unreachable_since
        if waited < self.give_up_after:
            return
        self.observer.error(PlatformUnreachableError.__name__)
        raise PlatformUnreachableError.after(waited, exc) from exc

    def _wait(self, seconds: float, what: str) -> None:
        if not may_wait():
            raise Deferred(seconds, f"{what} failed")
        self.stopper.sleep(seconds)
